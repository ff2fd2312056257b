// cuda_dl.h: cuDNN and cuBLAS are loaded at run time (dlopen), not linked, so the one galley
// binary starts on nodes that have neither (CPU-only nodes, the CPU image); the CUDA runtime
// itself is static and finds the driver the same way. After this header, backend code calls
// cudnnXxx / cublasXxx as usual: each name below becomes a call through the loaded table.
//
// To use another function, add it to the list: X(name) with its exported symbol name (cuBLAS's
// v2 API exports name_v2; cublas_v2.h already maps the plain names onto those).
#ifndef GALLEY_CUDA_DL_H
#define GALLEY_CUDA_DL_H

#include <cublas_v2.h>
#include <cudnn.h>

#define GL_CUDNN_FUNCS(X)                                                                     \
    X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream) \
    X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnSetTensorNdDescriptor) \
    X(cudnnSetTensor4dDescriptor) X(cudnnCreateFilterDescriptor) X(cudnnDestroyFilterDescriptor) \
    X(cudnnSetFilterNdDescriptor) X(cudnnCreateConvolutionDescriptor)                             \
    X(cudnnDestroyConvolutionDescriptor) X(cudnnSetConvolutionNdDescriptor)                      \
    X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType)                               \
    X(cudnnGetConvolutionNdForwardOutputDim) X(cudnnGetConvolutionForwardAlgorithm_v7)            \
    X(cudnnGetConvolutionBackwardDataAlgorithm_v7) X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) \
    X(cudnnFindConvolutionForwardAlgorithmEx) X(cudnnFindConvolutionBackwardDataAlgorithmEx)     \
    X(cudnnFindConvolutionBackwardFilterAlgorithmEx) X(cudnnGetConvolutionForwardWorkspaceSize)  \
    X(cudnnGetConvolutionBackwardDataWorkspaceSize) X(cudnnGetConvolutionBackwardFilterWorkspaceSize) \
    X(cudnnConvolutionForward) X(cudnnConvolutionBackwardData) X(cudnnConvolutionBackwardFilter) \
    X(cudnnConvolutionBackwardBias) X(cudnnAddTensor)                                             \
    X(cudnnGetLastErrorString) X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor)  \
    X(cudnnBackendSetAttribute) X(cudnnBackendGetAttribute) X(cudnnBackendFinalize) X(cudnnBackendExecute)

#define GL_CUBLAS_FUNCS(X)                                                                     \
    X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2) X(cublasGetVersion_v2)         \
    X(cublasSetMathMode) X(cublasSgemm_v2) X(cublasSgemmStridedBatched) X(cublasGetStatusString) \
    X(cublasSetWorkspace_v2)

// Functions that cublas_api.h overloads in C++ (an inline wrapper of the same name), so
// decltype(&::name) would be ambiguous: their members are typed by hand, loaded the same way.
typedef cublasStatus_t (*gl_cublas_gemm_ex_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                              const void *, const void *, cudaDataType, int, const void *,
                                              cudaDataType, int, const void *, void *, cudaDataType, int,
                                              cublasComputeType_t, cublasGemmAlgo_t);
#define GL_CUBLAS_TYPED_FUNCS(X) X(cublasGemmEx)

#define GL_DL_MEMBER(name) decltype(&::name) name;
typedef struct {
    GL_CUDNN_FUNCS(GL_DL_MEMBER)
    GL_CUBLAS_FUNCS(GL_DL_MEMBER)
    gl_cublas_gemm_ex_t cublasGemmEx;
} gl_cuda_dl;
#undef GL_DL_MEMBER

// Filled once by cuda_dl_load (read-only afterwards).
extern gl_cuda_dl gl_dl;

// "cuDNN x.y.z, cuBLAS x.y.z" (or "... not found"), without a GPU (`galley info`; NCCL is probed there).
void cuda_dl_versions(char *buf, size_t len);

// Loads libcudnn.so.9 and libcublas.so.13 (or .12); 0, or -1 with the reason in msg.
int cuda_dl_load(char *msg, size_t len);

#define GL_DL_REDIRECT(name) (gl_dl.name)
// The redirections: every call site below this point goes through the table.
#define cudnnGetVersion GL_DL_REDIRECT(cudnnGetVersion)
#define cudnnGetErrorString GL_DL_REDIRECT(cudnnGetErrorString)
#define cudnnCreate GL_DL_REDIRECT(cudnnCreate)
#define cudnnDestroy GL_DL_REDIRECT(cudnnDestroy)
#define cudnnSetStream GL_DL_REDIRECT(cudnnSetStream)
#define cudnnCreateTensorDescriptor GL_DL_REDIRECT(cudnnCreateTensorDescriptor)
#define cudnnDestroyTensorDescriptor GL_DL_REDIRECT(cudnnDestroyTensorDescriptor)
#define cudnnSetTensorNdDescriptor GL_DL_REDIRECT(cudnnSetTensorNdDescriptor)
#define cudnnSetTensor4dDescriptor GL_DL_REDIRECT(cudnnSetTensor4dDescriptor)
#define cudnnCreateFilterDescriptor GL_DL_REDIRECT(cudnnCreateFilterDescriptor)
#define cudnnDestroyFilterDescriptor GL_DL_REDIRECT(cudnnDestroyFilterDescriptor)
#define cudnnSetFilterNdDescriptor GL_DL_REDIRECT(cudnnSetFilterNdDescriptor)
#define cudnnCreateConvolutionDescriptor GL_DL_REDIRECT(cudnnCreateConvolutionDescriptor)
#define cudnnDestroyConvolutionDescriptor GL_DL_REDIRECT(cudnnDestroyConvolutionDescriptor)
#define cudnnSetConvolutionNdDescriptor GL_DL_REDIRECT(cudnnSetConvolutionNdDescriptor)
#define cudnnSetConvolutionGroupCount GL_DL_REDIRECT(cudnnSetConvolutionGroupCount)
#define cudnnSetConvolutionMathType GL_DL_REDIRECT(cudnnSetConvolutionMathType)
#define cudnnGetConvolutionNdForwardOutputDim GL_DL_REDIRECT(cudnnGetConvolutionNdForwardOutputDim)
#define cudnnGetConvolutionForwardAlgorithm_v7 GL_DL_REDIRECT(cudnnGetConvolutionForwardAlgorithm_v7)
#define cudnnGetConvolutionBackwardDataAlgorithm_v7 GL_DL_REDIRECT(cudnnGetConvolutionBackwardDataAlgorithm_v7)
#define cudnnGetConvolutionBackwardFilterAlgorithm_v7 GL_DL_REDIRECT(cudnnGetConvolutionBackwardFilterAlgorithm_v7)
#define cudnnFindConvolutionForwardAlgorithmEx GL_DL_REDIRECT(cudnnFindConvolutionForwardAlgorithmEx)
#define cudnnFindConvolutionBackwardDataAlgorithmEx GL_DL_REDIRECT(cudnnFindConvolutionBackwardDataAlgorithmEx)
#define cudnnFindConvolutionBackwardFilterAlgorithmEx GL_DL_REDIRECT(cudnnFindConvolutionBackwardFilterAlgorithmEx)
#define cudnnGetConvolutionForwardWorkspaceSize GL_DL_REDIRECT(cudnnGetConvolutionForwardWorkspaceSize)
#define cudnnGetConvolutionBackwardDataWorkspaceSize GL_DL_REDIRECT(cudnnGetConvolutionBackwardDataWorkspaceSize)
#define cudnnGetConvolutionBackwardFilterWorkspaceSize GL_DL_REDIRECT(cudnnGetConvolutionBackwardFilterWorkspaceSize)
#define cudnnConvolutionForward GL_DL_REDIRECT(cudnnConvolutionForward)
#define cudnnConvolutionBackwardData GL_DL_REDIRECT(cudnnConvolutionBackwardData)
#define cudnnConvolutionBackwardFilter GL_DL_REDIRECT(cudnnConvolutionBackwardFilter)
#define cudnnConvolutionBackwardBias GL_DL_REDIRECT(cudnnConvolutionBackwardBias)
#define cudnnAddTensor GL_DL_REDIRECT(cudnnAddTensor)
#define cudnnGetLastErrorString GL_DL_REDIRECT(cudnnGetLastErrorString)
#define cudnnBackendCreateDescriptor GL_DL_REDIRECT(cudnnBackendCreateDescriptor)
#define cudnnBackendDestroyDescriptor GL_DL_REDIRECT(cudnnBackendDestroyDescriptor)
#define cudnnBackendSetAttribute GL_DL_REDIRECT(cudnnBackendSetAttribute)
#define cudnnBackendGetAttribute GL_DL_REDIRECT(cudnnBackendGetAttribute)
#define cudnnBackendFinalize GL_DL_REDIRECT(cudnnBackendFinalize)
#define cudnnBackendExecute GL_DL_REDIRECT(cudnnBackendExecute)
#define cublasCreate_v2 GL_DL_REDIRECT(cublasCreate_v2)
#define cublasDestroy_v2 GL_DL_REDIRECT(cublasDestroy_v2)
#define cublasSetStream_v2 GL_DL_REDIRECT(cublasSetStream_v2)
#define cublasGetVersion_v2 GL_DL_REDIRECT(cublasGetVersion_v2)
#define cublasSetMathMode GL_DL_REDIRECT(cublasSetMathMode)
#define cublasSgemm_v2 GL_DL_REDIRECT(cublasSgemm_v2)
#define cublasSgemmStridedBatched GL_DL_REDIRECT(cublasSgemmStridedBatched)
#define cublasGetStatusString GL_DL_REDIRECT(cublasGetStatusString)
#define cublasSetWorkspace_v2 GL_DL_REDIRECT(cublasSetWorkspace_v2)
#define cublasGemmEx GL_DL_REDIRECT(cublasGemmEx)

#endif
