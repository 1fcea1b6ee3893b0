// cudasim: cuBLASLt matmuls on the CPU. D = alpha op(A) op(B) + beta C in column-major storage,
// the product in fp32 by OpenBLAS, then the epilogue: + bias (one value per row of D), GELU (tanh
// form, as cuBLASLt), and for the _AUX epilogues the pre-GELU value written to the aux matrix.
//
// Non-obvious decision: shapes are checked as the library does (layouts against m, n, k and the
// transposes, leading dimensions, an aux pointer for _AUX epilogues, device pointers), returning
// CUBLAS_STATUS_INVALID_VALUE with the reason on stderr, so a shape bug fails here as on a GPU.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cublasLt.h>

// OpenBLAS's sgemm, declared here so the simulator needs no cblas.h.
extern "C" void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
constexpr int kColMajor = 102, kNoTrans = 111, kTrans = 112;

namespace cudasim {
bool is_device_pointer(const void* p);
void check_red_zones(const char* after);
}  // namespace cudasim
// (cudasim::enqueue is declared in the simulator's cuda_runtime.h.)

struct cublasLtContext {
  int unused = 0;
};
struct cublasLtMatmulDescOpaque {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};
struct cublasLtMatrixLayoutOpaque {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque {
  size_t workspace = 0;
  uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
};

namespace {

cublasStatus_t invalid(const std::string& why) {
  std::fprintf(stderr, "cudasim: cuBLASLt: %s\n", why.c_str());
  return CUBLAS_STATUS_INVALID_VALUE;
}

float load(cudaDataType t, const void* p, size_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  return static_cast<float>(static_cast<const __nv_bfloat16*>(p)[i]);
}
void store(cudaDataType t, void* p, size_t i, float v) {
  if (t == CUDA_R_32F)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<__nv_bfloat16*>(p)[i] = __nv_bfloat16(v);
}

float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

bool has_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_gelu(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

// m, n, k of the product, or an error naming the disagreement.
cublasStatus_t shapes(const cublasLtMatmulDescOpaque* op, const cublasLtMatrixLayoutOpaque* a,
                      const cublasLtMatrixLayoutOpaque* b, const cublasLtMatrixLayoutOpaque* d, uint64_t* m,
                      uint64_t* n, uint64_t* k) {
  if (op == nullptr || a == nullptr || b == nullptr || d == nullptr) return invalid("null descriptor");
  *m = d->rows;
  *n = d->cols;
  const uint64_t am = op->ta == CUBLAS_OP_N ? a->rows : a->cols,
                 ak = op->ta == CUBLAS_OP_N ? a->cols : a->rows;
  const uint64_t bk = op->tb == CUBLAS_OP_N ? b->rows : b->cols,
                 bn = op->tb == CUBLAS_OP_N ? b->cols : b->rows;
  *k = ak;
  if (am != *m) return invalid("op(A) has " + std::to_string(am) + " rows but D has " + std::to_string(*m));
  if (bn != *n)
    return invalid("op(B) has " + std::to_string(bn) + " columns but D has " + std::to_string(*n));
  if (bk != ak)
    return invalid("op(A) is ?x" + std::to_string(ak) + " but op(B) is " + std::to_string(bk) + "x?");
  for (const auto* l : {a, b, d})
    if (l->ld < static_cast<int64_t>(l->rows)) return invalid("leading dimension below the row count");
  if (a->type != b->type || a->type != d->type) return invalid("mixed data types");
  if (a->type != CUDA_R_32F && a->type != CUDA_R_16BF) return invalid("data type not simulated");
  if (!has_bias(op->epilogue) && !has_gelu(op->epilogue) && op->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
size_t cublasLtGetVersion() { return 130000; }
const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}
cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  *value = type == MAJOR_VERSION ? 13 : 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return invalid("only fp32 compute is simulated");
  *d = new cublasLtMatmulDescOpaque;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (size != sizeof(cublasOperation_t)) return invalid("TRANSA/B size");
      std::memcpy(attr == CUBLASLT_MATMUL_DESC_TRANSA ? &d->ta : &d->tb, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (size != sizeof(cublasLtEpilogue_t)) return invalid("EPILOGUE size");
      std::memcpy(&d->epilogue, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (size != sizeof(void*)) return invalid("BIAS_POINTER size");
      std::memcpy(&d->bias, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      if (size != sizeof(void*)) return invalid("EPILOGUE_AUX_POINTER size");
      std::memcpy(&d->aux, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      if (size != sizeof(int64_t)) return invalid("EPILOGUE_AUX_LD must be an int64_t");
      std::memcpy(&d->aux_ld, buf, size);
      return CUBLAS_STATUS_SUCCESS;
  }
  return invalid("attribute not simulated");
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  *l = new cublasLtMatrixLayoutOpaque{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceOpaque;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == sizeof(size_t)) {
    std::memcpy(&p->workspace, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (attr == CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK && size == sizeof(uint32_t)) {
    std::memcpy(&p->reduction_mask, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  return invalid("preference attribute or size not simulated");
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
  *found = 0;
  if (h == nullptr || pref == nullptr || c == nullptr || requested < 1) return invalid("heuristic arguments");
  uint64_t m, n, k;
  const cublasStatus_t s = shapes(op, a, b, d, &m, &n, &k);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) return s;
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  std::memset(&results[0], 0, sizeof results[0]);
  results[0].algo.data[0] = 1;  // the one simulated algorithm: no split-K, any reduction mask fits
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b,
                              const void* beta, const void* C, cublasLtMatrixLayout_t c, void* D,
                              cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (h == nullptr || algo == nullptr || c == nullptr) return invalid("matmul arguments");
  uint64_t m, n, k;
  const cublasStatus_t s = shapes(op, a, b, d, &m, &n, &k);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (c->rows != d->rows || c->cols != d->cols) return invalid("C and D layouts differ");
  for (const void* p : {A, B, C, static_cast<const void*>(D)})
    if (!cudasim::is_device_pointer(p)) return invalid("A, B, C or D is not device memory");
  if (workspace_bytes > 0 && !cudasim::is_device_pointer(workspace))
    return invalid("workspace is not device memory");
  if (has_bias(op->epilogue) && (op->bias == nullptr || !cudasim::is_device_pointer(op->bias)))
    return invalid("a BIAS epilogue without a device bias pointer");
  if (has_aux(op->epilogue) &&
      (op->aux == nullptr || !cudasim::is_device_pointer(op->aux) || op->aux_ld < static_cast<int64_t>(m)))
    return invalid("a GELU_AUX epilogue without a device aux pointer and ld >= m");
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  // Queued on the stream like a kernel, with the descriptors and scalars copied now (the caller
  // may change or destroy them once the call returns, as cuBLASLt allows).
  cudasim::enqueue(stream, [opd = *op, ad = *a, bd = *b, cd = *c, dd = *d, m, n, k, al, be, A, B, C, D] {
    const cublasLtMatmulDescOpaque* op = &opd;
    const cublasLtMatrixLayoutOpaque *a = &ad, *b = &bd, *c = &cd, *d = &dd;
    const cudaDataType t = d->type;
    // fp32 copies of the stored operands, multiplied by OpenBLAS in the same column-major layout.
    auto as_float = [t](const void* p, const cublasLtMatrixLayoutOpaque* l) {
      const size_t n_el = static_cast<size_t>(l->ld) * (l->cols - 1) + l->rows;
      std::vector<float> f(n_el);
      for (size_t i = 0; i < n_el; ++i) f[i] = load(t, p, i);
      return f;
    };
    const std::vector<float> fa = as_float(A, a), fb = as_float(B, b);
    std::vector<float> prod(static_cast<size_t>(m) * n);
    cblas_sgemm(kColMajor, op->ta == CUBLAS_OP_N ? kNoTrans : kTrans,
                op->tb == CUBLAS_OP_N ? kNoTrans : kTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), al, fa.data(), static_cast<int>(a->ld), fb.data(),
                static_cast<int>(b->ld), 0.0f, prod.data(), static_cast<int>(m));
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        float v = prod[i + j * m];
        if (be != 0.0f) v += be * load(t, C, i + j * static_cast<uint64_t>(c->ld));
        if (has_bias(op->epilogue)) v += load(t, op->bias, i);
        if (has_aux(op->epilogue)) store(t, op->aux, i + j * static_cast<uint64_t>(op->aux_ld), v);
        if (has_gelu(op->epilogue)) v = gelu_tanh(v);
        prod[i + j * m] = v;
      }
    }
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < m; ++i) store(t, D, i + j * static_cast<uint64_t>(d->ld), prod[i + j * m]);
    cudasim::check_red_zones("cublasLtMatmul");
  });
  return CUBLAS_STATUS_SUCCESS;
}
