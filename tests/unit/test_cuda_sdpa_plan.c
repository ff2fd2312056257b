// test_cuda_sdpa_plan.c: cuDNN's fused-attention graphs (cuda_sdpa_graph.cu) taken by cuDNN
// without a GPU. cuDNN 9.8+ builds execution plans for a device described by its properties
// (a JSON of compute capability, SM count, shared memory, ...), so on a machine with cuDNN and
// no GPU this checks what a GPU run would first find out: that the forward and backward graphs
// are well formed, that cuDNN's heuristics give an engine for them on sm_90 (H100, H200) and
// sm_80 (A100), and that the engine compiles them. Loading the compiled kernels needs a CUDA
// driver: with the CUDA toolkit's stub libcuda (tests/CMakeLists.txt puts it on the library path
// for this test) the plan stops there, with CUDA_DRIVER in cuDNN's reason; with a real driver it
// finishes. The plan tests skip where cuDNN or a libcuda does not load; the policy of which
// kernels run (sdpa_decide) is checked wherever galley is built with CUDA; exit 77 (skipped)
// without CUDA.
#include "testlib.h"

#if !GALLEY_HAVE_CUDA
int main(void) {
    printf("test_cuda_sdpa_plan: skipped: built without CUDA (GALLEY_HAVE_CUDA=0)\n");
    return 77;
}
#else
#include <dlfcn.h>
#include <errno.h>
#include <unistd.h>

#include "galley/cuda_probe.h"

// cuDNN's device-property JSON of three GPUs (the fields cuDNN 9.19 asks for; values from each
// card's CUDA device attributes).
#define GPU_JSON(ver, sms, optin, l2, name)                                                                       \
    "{\"cudaDeviceId\":0,\"deviceVer\":" #ver ",\"driverVer\":13000,\"totalGlobalMem\":85017755648,"              \
    "\"maxGridSize\":[2147483647,65535,65535],\"maxBlockSize\":[1024,1024,64],\"regsPerBlock\":65536,"           \
    "\"multiProcessorCount\":" #sms ",\"warpSize\":32,\"maxSharedMemoryPerBlock\":49152,"                        \
    "\"maxSharedMemoryPerBlockOptin\":" #optin ",\"reservedSharedMemoryPerBlock\":1024,"                          \
    "\"maxRegistersPerSM\":65536,\"maxCtasPerSM\":32,\"maxThreadsPerBlock\":1024,\"maxThreadsPerSM\":2048,"       \
    "\"pciDeviceId\":0,\"isTccDriver\":0,\"supportCoopLaunch\":1,\"smClockRateKHz\":1980000,"                     \
    "\"memClockRateKHz\":2619000,\"l2CacheSize\":" #l2 ",\"deviceName\":\"" name "\"}"

static const struct {
    const char *name, *json;
} gpus[] = {
    {"H100 (sm_90)", GPU_JSON(900, 132, 232448, 52428800, "NVIDIA H100 80GB HBM3")},
    {"H200 (sm_90)", GPU_JSON(900, 132, 232448, 62914560, "NVIDIA H200")},
    {"A100 (sm_80)", GPU_JSON(800, 108, 166912, 41943040, "NVIDIA A100-SXM4-40GB")},
};

// The tutorial ViT's attention (4,050 tokens, 8 heads of 48), vit-tiny's (65 tokens, 3 heads of
// 64), a wide head and a sequence under one tile.
static const struct {
    int64_t n, t, h, e;
} geoms[] = {{16, 4050, 8, 48}, {64, 65, 3, 64}, {2, 300, 4, 128}, {3, 7, 2, 32}};

static void test_sdpa_plans(void **state) {
    (void)state;
    // Every geometry in both types on the H100; the tutorial's in bf16 on the others (each plan
    // costs about a second of NVRTC compiling).
    for (size_t d = 0; d < sizeof gpus / sizeof gpus[0]; d++)
        for (size_t k = 0; k < (d == 0 ? sizeof geoms / sizeof geoms[0] : 1); k++)
            for (int bf16 = 1; bf16 >= (d == 0 ? 0 : 1); bf16--) {
                char msg[1024] = "";
                int stage = -1;
                int64_t eng[2] = {-1, -1};
                const int rc = cuda_sdpa_check(gpus[d].json, geoms[k].n, geoms[k].t, geoms[k].h, geoms[k].e, bf16,
                                               &stage, eng, msg, sizeof msg);
                printf("    %s %s n %lld t %lld h %lld e %lld: %s\n", gpus[d].name, bf16 ? "bf16" : "fp16",
                       (long long)geoms[k].n, (long long)geoms[k].t, (long long)geoms[k].h, (long long)geoms[k].e,
                       rc == 0 ? "both plans built" : msg);
                if (rc == 0) continue;
                if (stage == 4 && strstr(msg, "CUDA_DRIVER")) continue;  // the stub driver: as far as it goes
                fail_msg("%s %s n %lld t %lld h %lld e %lld: stage %d: %s", gpus[d].name, bf16 ? "bf16" : "fp16",
                         (long long)geoms[k].n, (long long)geoms[k].t, (long long)geoms[k].h, (long long)geoms[k].e,
                         stage, msg);
            }
}

// Geometries cuDNN's engines do not take are turned away at the heuristics, with cuDNN's
// reason: the check above would pass for any graph if nothing were ever refused.
static void test_sdpa_refusal(void **state) {
    (void)state;
    static const struct {
        int64_t e;
        const char *dir, *why;
    } cases[] = {{20, "forward", "multiple of 8"}, {264, "backward", "256"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char msg[1024] = "";
        int stage = -1;
        int64_t eng[2] = {-1, -1};
        const int rc = cuda_sdpa_check(gpus[0].json, 2, 64, 2, cases[k].e, 1, &stage, eng, msg, sizeof msg);
        printf("    e %lld: stage %d: %.300s\n", (long long)cases[k].e, stage, msg);
        assert_int_equal(rc, -1);
        assert_int_equal(stage, 3);
        assert_non_null(strstr(msg, cases[k].dir));
        assert_non_null(strstr(msg, cases[k].why));
    }
}

static char no_plans[512];  // why cuDNN's plans cannot be built here ("" when they can)

static void test_sdpa_plans_or_skip(void **state) {
    if (*no_plans) {
        printf("    skipped: %s\n", no_plans);
        skip();
    }
    test_sdpa_plans(state);
}

static void test_sdpa_refusal_or_skip(void **state) {
    if (*no_plans) skip();
    test_sdpa_refusal(state);
}

// The policy of cuda_sdpa.cu (sdpa_decide): which path one attention call takes.
static void test_sdpa_decide(void **state) {
    (void)state;
    // a call cuDNN could take, planned and measured in favour of cuDNN (GALLEY_ATTENTION_KERNEL=measure)
    const sdpa_facts ok = {ATTN_MEASURE, 1, 0, 0.0f, 1, 1, 1, 0};
    static const struct {
        const char *what;
        int field, value, want;  // field: which of sdpa_facts to change (below)
    } cases[] = {
        {"measure, measured for cuDNN", -1, 0, SDPA_CUDNN},
        {"measure, measured for galley", 6, 0, SDPA_GALLEY},
        {"measure, not measured", 6, -1, SDPA_MEASURE},
        {"measure, no plan yet", 5, 0, SDPA_BUILD},
        {"cuDNN declined the geometry", 5, -1, SDPA_GALLEY},
        {"fp32 precision", 1, 0, SDPA_GALLEY},
        {"causal mask", 2, 1, SDPA_GALLEY},
        {"attention dropout", 3, 1, SDPA_GALLEY},
        {"a width cuDNN cannot take", 4, 0, SDPA_GALLEY},
        {"GALLEY_ATTENTION_KERNEL=galley (the default)", 0, ATTN_GALLEY, SDPA_GALLEY},
        {"GALLEY_ATTENTION_KERNEL=fp32", 0, ATTN_FP32, SDPA_GALLEY},
        {"GALLEY_ATTENTION_KERNEL=cudnn, measured for galley", 100, 0, SDPA_CUDNN},
        {"GALLEY_ATTENTION_KERNEL=cudnn, no plan yet", 101, 0, SDPA_BUILD},
        {"recording, settled for cuDNN", 7, 1, SDPA_CUDNN},
        {"recording, not measured", 102, 0, SDPA_BREAK},
        {"recording, no plan yet", 103, 0, SDPA_BREAK},
        {"recording, cuDNN declined", 104, 0, SDPA_GALLEY},
        {"recording, GALLEY_ATTENTION_KERNEL=cudnn with a plan", 105, 0, SDPA_CUDNN},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sdpa_facts f = ok;
        switch (cases[k].field) {
        case 0: f.mode = cases[k].value; break;
        case 1: f.half = cases[k].value; break;
        case 2: f.causal = cases[k].value; break;
        case 3: f.rate = 0.1f * (float)cases[k].value; break;
        case 4: f.fits = cases[k].value; break;
        case 5: f.state = cases[k].value; break;
        case 6: f.choice = cases[k].value; break;
        case 7: f.capturing = cases[k].value; break;
        case 100: f.mode = ATTN_CUDNN, f.choice = 0; break;
        case 101: f.mode = ATTN_CUDNN, f.state = 0; break;
        case 102: f.capturing = 1, f.choice = -1; break;
        case 103: f.capturing = 1, f.state = 0; break;
        case 104: f.capturing = 1, f.state = -1; break;
        case 105: f.capturing = 1, f.mode = ATTN_CUDNN, f.choice = -1; break;
        default: break;
        }
        const int got = sdpa_decide(&f);
        if (got != cases[k].want) fail_msg("%s: sdpa_decide gave %d, want %d", cases[k].what, got, cases[k].want);
    }
    printf("    %zu cases of the attention kernels' choice\n", sizeof cases / sizeof cases[0]);
}

int main(int argc, char **argv) {
    (void)argc;
    // No CUDA driver here: run again with the toolkit's stub libcuda (GALLEY_TEST_CUDA_STUB, set by
    // tests/CMakeLists.txt) first on the library path, so cuDNN gets as far as loading kernels.
    const char *stub = getenv("GALLEY_TEST_CUDA_STUB");
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv && stub && *stub && !getenv("GALLEY_TEST_CUDA_STUBBED")) {
        char path[4096];
        const char *old = getenv("LD_LIBRARY_PATH");
        snprintf(path, sizeof path, "%s%s%s", stub, old && *old ? ":" : "", old ? old : "");
        setenv("LD_LIBRARY_PATH", path, 1);
        setenv("GALLEY_TEST_CUDA_STUBBED", "1", 1);
        execv("/proc/self/exe", argv);
        printf("test_cuda_sdpa_plan: cannot run again with the stub driver: %s\n", strerror(errno));
        return 1;
    }
    // cuDNN's heuristics drop every engine that compiles kernels when no libcuda loads
    if (!drv && !(drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)))
        snprintf(no_plans, sizeof no_plans, "no libcuda.so.1 (no CUDA driver and no toolkit stub)");
    if (drv) dlclose(drv);
    char msg[512];
    int stage = 0;
    int64_t eng[2];
    // cuDNN older than 9.8 (no device properties), or missing what its engines need to compile
    // (NVRTC, the driver): the plan tests cannot say anything about the graphs here.
    if (!*no_plans && cuda_sdpa_check(gpus[0].json, 1, 64, 1, 64, 1, &stage, eng, msg, sizeof msg) < 0 &&
        (stage < 2 || strstr(msg, "PREREQUISITE_MISSING")))
        snprintf(no_plans, sizeof no_plans, "%s", msg);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_sdpa_decide), cmocka_unit_test(test_sdpa_plans_or_skip),
                                       cmocka_unit_test(test_sdpa_refusal_or_skip)};
    return cmocka_run_group_tests_name("test_cuda_sdpa_plan", tests, NULL, NULL);
}
#endif
