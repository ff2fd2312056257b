// cuda_dl.cu: loads cuDNN and cuBLAS at run time (see cuda_dl.h for why).
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

// The table's member types come from the real prototypes; the redirecting macros in cuda_dl.h
// must not rename them here, so this file declares the table before including the rest.
#include "backend/cuda/cuda_dl.h"

gl_cuda_dl gl_dl;

// dlopen the first of names that loads; NULL with dlerror's text in msg otherwise.
static void *open_first(const char *const *names, char *msg, size_t len) {
    const char *why = "";
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
        why = dlerror();
    }
    snprintf(msg, len, "cannot load %s (%s); the CUDA backend needs cuDNN 9 and cuBLAS on the library path "
                       "(they come with NVIDIA's NGC images)", names[0], why ? why : "");
    return NULL;
}

// dlsym every function of one library into the table; -1 naming the first one missing.
#define GL_DL_SYM(name)                                                                         \
    if (!(*(void **)&loaded.name = dlsym(lib, #name))) {                                        \
        snprintf(msg, len, "%s: symbol %s not found (cuDNN 9 and cuBLAS 12 or 13 are needed)", libname, #name); \
        return -1;                                                                              \
    }

int cuda_dl_load(char *msg, size_t len) {
    static const char *const cudnn_names[] = {"libcudnn.so.9", "libcudnn.so", NULL};
    static const char *const cublas_names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL};
    gl_cuda_dl loaded;
    memset(&loaded, 0, sizeof loaded);
    void *lib = open_first(cudnn_names, msg, len);
    const char *libname = "cuDNN";
    if (!lib) return -1;
// The macros of cuda_dl.h would turn `loaded.cudnnCreate` into `loaded.(gl_dl.cudnnCreate)`.
#pragma push_macro("GL_DL_REDIRECT")
#undef GL_DL_REDIRECT
#define GL_DL_REDIRECT(name) name
    GL_CUDNN_FUNCS(GL_DL_SYM)
    lib = open_first(cublas_names, msg, len);
    libname = "cuBLAS";
    if (!lib) return -1;
    GL_CUBLAS_FUNCS(GL_DL_SYM)
    GL_CUBLAS_TYPED_FUNCS(GL_DL_SYM)
#pragma pop_macro("GL_DL_REDIRECT")
    gl_dl = loaded;
    return 0;
}

// "cuDNN 9.19.0, cuBLAS 13.1.0", with "not found" for a library that does not load:
// what `galley info` shows. Each library is opened on its own, so one missing does not hide the rest.
void cuda_dl_versions(char *buf, size_t len) {
    size_t k = 0;
    void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    size_t (*dnn)(void) = h ? (size_t(*)(void))dlsym(h, "cudnnGetVersion") : NULL;
    if (dnn) {
        size_t v = dnn();
        k += (size_t)snprintf(buf + k, len - k, "cuDNN %zu.%zu.%zu", v / 10000, (v % 10000) / 100, v % 100);
    } else {
        k += (size_t)snprintf(buf + k, len - k, "cuDNN 9 not found");
    }
    h = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libcublas.so.12", RTLD_NOW | RTLD_LOCAL);
    cublasStatus_t (*prop)(libraryPropertyType, int *) =
        h ? (cublasStatus_t(*)(libraryPropertyType, int *))dlsym(h, "cublasGetProperty") : NULL;
    int ma = 0, mi = 0, pa = 0;
    if (prop && prop(MAJOR_VERSION, &ma) == CUBLAS_STATUS_SUCCESS && prop(MINOR_VERSION, &mi) == CUBLAS_STATUS_SUCCESS &&
        prop(PATCH_LEVEL, &pa) == CUBLAS_STATUS_SUCCESS)
        snprintf(buf + k, len - k, ", cuBLAS %d.%d.%d", ma, mi, pa);
    else
        snprintf(buf + k, len - k, ", cuBLAS not found");
}
