// A C interface over the fork's TurboMind SM70 FP8 units (converters and GEMM), for a
// library that Python loads with ctypes and registers under the fork's op schemas
// through torch.library. It includes no torch header, so one build loads into any
// torch. The torch tensor work the fork's own op glue does (transposes, the fp16
// group-scale expansion) is done by the caller; this file does the TurboMind calls,
// the dispatch policy and the shape checks, with the glue's messages.
//
// Built to compute_70 PTX only: the driver compiles it for the GPU at hand. TurboMind
// registers its kernels only on a device that reports 7.x, so the library is linked
// with --wrap=cudaGetDeviceProperties_v2 and reports 7.0 (the SM count and the
// shared-memory limits stay the device's own). That wrap is for testing on a newer
// GPU; it does not make the results V100 results.

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <set>
#include <utility>

#include "src/turbomind/core/data_type.h"
#include "src/turbomind/kernels/gemm/cast.h"
#include "src/turbomind/kernels/gemm/convert.h"
#include "src/turbomind/kernels/gemm/gemm.h"
#include "src/turbomind/kernels/gemm/types.h"
#include "src/turbomind/kernels/gemm/utils.h"

namespace tg = turbomind::gemm;

namespace {

thread_local std::string last_error;

int fail(const char* message)
{
    last_error = message;
    return -1;
}

int fail_cuda(const char* what, cudaError_t ec)
{
    last_error = std::string(what) + ": " + cudaGetErrorString(ec);
    return -2;
}

__global__ void transpose_u16(const uint16_t* src, uint16_t* dst, int rows, int cols)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        dst[(int64_t)c * rows + r] = src[(int64_t)r * cols + c];
    }
}

// The weight's and the scales' layouts, as the fork's glue derives them.
struct Layouts {
    tg::MatrixLayout w_src, w_dst, s_src, s_dst;
    bool             w_row_major;
};

bool layouts(int n, int k, int group_size, Layouts& out)
{
    const auto converters = tg::GetConverters(turbomind::kHalf, turbomind::kFloat8_e4m3, turbomind::kHalf, true, 70);
    const auto* conv_w     = converters[0];
    const auto* conv_s     = converters[1];
    if (!conv_w || !conv_s) {
        return false;
    }
    const bool is_A_w = tg::get_operand_tag(conv_w->pack) == tg::OPERAND_A;
    tg::MatrixLayout w{turbomind::kHalf, conv_w->order, n, k, conv_w->order == tg::kRowMajor ? k : n};
    if (!is_A_w) {
        std::swap(w.rows, w.cols);
        w.order = ~w.order;
    }
    tg::MatrixLayout kd = w;
    kd.type             = turbomind::data_type_v<uint8_t>;
    kd.pack             = conv_w->pack;
    if (is_A_w) {
        kd = tg::transpose(kd);
    }
    const bool is_A_s     = tg::get_operand_tag(conv_s->pack) == tg::OPERAND_U;
    const int  num_groups = (k + group_size - 1) / group_size;
    tg::MatrixLayout s{turbomind::kUint16, conv_s->order, n, num_groups, n};
    if (!is_A_s) {
        std::swap(s.rows, s.cols);
        s.order = ~s.order;
    }
    tg::MatrixLayout q = s;
    q.pack             = conv_s->pack;
    if (is_A_s) {
        q = tg::transpose(q);
    }
    out = Layouts{w, kd, s, q, conv_w->order == tg::kRowMajor};
    return true;
}

struct Workspace {
    tg::Workspace ws{};
};

std::mutex                                                   state_mutex;
std::unordered_map<int, tg::Gemm*>                           gemms;
std::unordered_map<uint64_t, Workspace>                      workspaces;
std::set<std::tuple<int, int, int, int, int>>                tuned;

int env_int(const char* name, int fallback)
{
    const char* raw = std::getenv(name);
    return raw ? std::max(std::atoi(raw), 0) : fallback;
}

// The fork's default FP8 dense policy: shapes with M up to VLLM_SM70_FP8_DENSE_TUNE_MAX_M
// (16) are measured once on the device at hand, then reused; larger M take the default.
tg::DispatchPolicy policy(int device, int m, int n, int k, int group_size, cudaStream_t stream)
{
    const char* tune = std::getenv("VLLM_SM70_FP8_TUNE_SMALL_SHAPES");
    const bool  on   = tune == nullptr || std::atoi(tune) != 0;
    if (m > env_int("VLLM_SM70_FP8_DENSE_TUNE_MAX_M", 16) || !on) {
        return tg::DispatchPolicy::kDefault;
    }
    auto key = std::make_tuple(device, m, n, k, group_size);
    if (tuned.count(key)) {
        return tg::DispatchPolicy::kReuse;
    }
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
        return tg::DispatchPolicy::kDefault;
    }
    cudaGetLastError();
    tuned.insert(key);
    return tg::DispatchPolicy::kMeasure;
}

int workspace_for(int device, cudaStream_t stream, tg::Workspace*& out)
{
    const uint64_t key = (uint64_t)(uintptr_t)stream ^ ((uint64_t)device << 56);
    auto           it  = workspaces.find(key);
    if (it == workspaces.end()) {
        Workspace w;
        cudaError_t ec;
        if ((ec = cudaMalloc(&w.ws.barriers, tg::Gemm::kBarriersSize)) != cudaSuccess
            || (ec = cudaMalloc(&w.ws.partials, tg::Gemm::kPartialsSize)) != cudaSuccess
            || (ec = cudaMalloc(&w.ws.tensormaps, 8192 * 128)) != cudaSuccess
            || (ec = cudaMalloc(&w.ws.flags, sizeof(int))) != cudaSuccess) {
            return fail_cuda("fp8_gemm_sm70: workspace allocation failed", ec);
        }
        w.ws.barriers_size   = tg::Gemm::kBarriersSize;
        w.ws.partials_size   = tg::Gemm::kPartialsSize;
        w.ws.tensormaps_size = 8192 * 128;
        cudaMemset(w.ws.barriers, 0, tg::Gemm::kBarriersSize);
        cudaMemset(w.ws.partials, 0, tg::Gemm::kPartialsSize);
        cudaMemset(w.ws.flags, 0, sizeof(int));
        it = workspaces.emplace(key, w).first;
    }
    out = &it->second.ws;
    return 0;
}

// ---- The test-only fault switch. Compiled in only with -DFPSM70_FAULT_SWITCH (forkpatch's
// `ptxbuild --fault-switch`, a library of its own name): FORKPATCH_PTX_FAULT then makes
// the library wrong on purpose, so that the gpu-jit tier's negative controls show that
// the checks catch a wrong kernel. A plain build never reads the variable.
//   scale=F           the GEMM's output multiplied by F
//   zero-cols=A-B     output columns A to B (both included) set to 0
//   misplaced-scales  fp8_sm70_prepare packs the block scales one 128-column block over
struct Fault {
    int   kind  = 0;  // 0 none, 1 scale, 2 zero-cols, 3 misplaced-scales
    float scale = 1.f;
    int   first = 0, last = 0;
};

#ifdef FPSM70_FAULT_SWITCH
Fault fault_now()
{
    Fault       f;
    const char* raw = std::getenv("FORKPATCH_PTX_FAULT");
    if (raw == nullptr || *raw == 0) {
        return f;
    }
    if (std::sscanf(raw, "scale=%f", &f.scale) == 1) {
        f.kind = 1;
    }
    else if (std::sscanf(raw, "zero-cols=%d-%d", &f.first, &f.last) == 2) {
        f.kind = 2;
    }
    else if (std::strcmp(raw, "misplaced-scales") == 0) {
        f.kind = 3;
    }
    else {
        f.kind = -1;  // unknown: every call fails, naming it
    }
    return f;
}
#else
Fault fault_now()
{
    return Fault{};
}
#endif

__global__ void fault_output(__half* out, int rows, int cols, int64_t stride0, Fault f)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        __half& v = out[(int64_t)r * stride0 + c];
        if (f.kind == 1) {
            v = __float2half(__half2float(v) * f.scale);
        }
        else if (f.kind == 2 && c >= f.first && c <= f.last) {
            v = __float2half(0.f);
        }
    }
}

__global__ void rotate_cols_u16(const uint16_t* src, uint16_t* dst, int rows, int cols, int shift)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        dst[(int64_t)r * cols + c] = src[(int64_t)r * cols + (c + shift) % cols];
    }
}

}  // namespace

// Reports 7.0 for every device, with the device's own SM count and shared-memory limits.
extern "C" cudaError_t __real_cudaGetDeviceProperties_v2(cudaDeviceProp* prop, int device);
extern "C" cudaError_t __wrap_cudaGetDeviceProperties_v2(cudaDeviceProp* prop, int device)
{
    const cudaError_t ec = __real_cudaGetDeviceProperties_v2(prop, device);
    if (ec == cudaSuccess) {
        prop->major = 7;
        prop->minor = 0;
    }
    return ec;
}

extern "C" {

const char* fpsm70_last_error()
{
    return last_error.c_str();
}

// "" for a plain build; for a fault-switch build, "fault-switch: " and the fault now set.
const char* fpsm70_fault()
{
#ifdef FPSM70_FAULT_SWITCH
    static thread_local std::string text;
    const char*                     raw = std::getenv("FORKPATCH_PTX_FAULT");
    text = std::string("fault-switch: ") + (raw && *raw ? raw : "off");
    return text.c_str();
#else
    return "";
#endif
}

// The capability TurboMind sees (7.0 through the wrap) and the device's real one.
int fpsm70_capability(int device, int* seen, int* real)
{
    cudaDeviceProp prop{};
    cudaError_t    ec = cudaGetDeviceProperties(&prop, device);
    if (ec != cudaSuccess) {
        return fail_cuda("cudaGetDeviceProperties", ec);
    }
    *seen = prop.major * 10 + prop.minor;
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    *real = major * 10 + minor;
    return 0;
}

// fp8_sm70_prepare: q_kn is the e4m3 weight transposed to [K, N] (uint8, contiguous),
// group_scales the fp16 scales [ceil(K/group), N]; writes the packed weight [K, N] and
// scales [ceil(K/group), N] and (k_ld, q_ld) into lds.
int fpsm70_prepare(const void* q_kn, const void* group_scales, int64_t n, int64_t k, int64_t group_size,
                   void* tm_weight, void* tm_scales, int64_t* lds, int device, void* stream_ptr)
{
    auto stream = static_cast<cudaStream_t>(stream_ptr);
    // This library's (static) runtime keeps its own current device: the caller's.
    if (cudaError_t ec = cudaSetDevice(device); ec != cudaSuccess) {
        return fail_cuda("fp8_sm70_prepare: cudaSetDevice", ec);
    }
    if (group_size != 128) {
        return fail("fp8_sm70_prepare: only group_size=128 is supported.");
    }
    if (k % 8 != 0 || n % 8 != 0) {
        return fail("fp8_sm70_prepare: K and N must be multiples of 8.");
    }
    Layouts l;
    if (!layouts((int)n, (int)k, (int)group_size, l)) {
        return fail("fp8_sm70_prepare: no compatible TurboMind converters.");
    }
    const auto converters = tg::GetConverters(turbomind::kHalf, turbomind::kFloat8_e4m3, turbomind::kHalf, true, 70);
    const Fault fault = fault_now();
    if (fault.kind < 0) {
        return fail("fp8_sm70_prepare: unknown FORKPATCH_PTX_FAULT");
    }
    uint16_t* moved = nullptr;
    if (fault.kind == 3) {  // the scales of column block b+1 packed as block b's
        const int groups = (int)((k + group_size - 1) / group_size);
        if (cudaError_t ec = cudaMallocAsync((void**)&moved, (size_t)groups * n * 2, stream); ec != cudaSuccess) {
            return fail_cuda("fp8_sm70_prepare: allocation failed", ec);
        }
        dim3 block(32, 8);
        dim3 grid((unsigned)((n + 31) / 32), (unsigned)((groups + 7) / 8));
        rotate_cols_u16<<<grid, block, 0, stream>>>(
            static_cast<const uint16_t*>(group_scales), moved, groups, (int)n, (int)group_size);
        group_scales = moved;
    }
    uint16_t* u16 = nullptr;
    uint16_t* u16_t = nullptr;
    cudaError_t ec = cudaMallocAsync((void**)&u16, (size_t)(k * n * 2), stream);
    if (ec != cudaSuccess) {
        return fail_cuda("fp8_sm70_prepare: allocation failed", ec);
    }
    turbomind::extend_to_u16(u16, static_cast<const uint8_t*>(q_kn), (size_t)(k * n), stream);
    const uint16_t* src = u16;
    if (l.w_row_major) {
        ec = cudaMallocAsync((void**)&u16_t, (size_t)(k * n * 2), stream);
        if (ec != cudaSuccess) {
            cudaFreeAsync(u16, stream);
            return fail_cuda("fp8_sm70_prepare: allocation failed", ec);
        }
        dim3 block(32, 8);
        dim3 grid((unsigned)((n + 31) / 32), (unsigned)((k + 7) / 8));
        transpose_u16<<<grid, block, 0, stream>>>(u16, u16_t, (int)k, (int)n);
        src = u16_t;
    }
    const int w_rc = converters[0]->Convert(src, l.w_src, tm_weight, l.w_dst, stream);
    cudaFreeAsync(u16, stream);
    if (u16_t) {
        cudaFreeAsync(u16_t, stream);
    }
    if (w_rc != 0) {
        return fail("fp8_sm70_prepare: weight conversion failed.");
    }
    const int s_rc = converters[1]->Convert(group_scales, l.s_src, tm_scales, l.s_dst, stream);
    if (moved) {
        cudaFreeAsync(moved, stream);
    }
    if (s_rc != 0) {
        return fail("fp8_sm70_prepare: scale conversion failed.");
    }
    lds[0] = l.w_dst.ld;
    lds[1] = l.s_dst.ld;
    if ((ec = cudaGetLastError()) != cudaSuccess) {
        return fail_cuda("fp8_sm70_prepare", ec);
    }
    return 0;
}

// fp8_gemm_sm70_out: out[m, out_cols] = x[m, k] @ W, W the packed [w_rows, n] weight with
// scales [s_rows, s_cols]; strides in elements.
int fpsm70_gemm(void* out, int64_t out_rows, int64_t out_cols, int64_t out_stride0, int64_t out_stride1,
                const void* x, int64_t m, int64_t k, int64_t x_stride0, const void* tm_weight, int64_t w_rows,
                int64_t n, const void* tm_scales, int64_t s_rows, int64_t s_cols, int64_t group_size,
                int64_t k_ld, int64_t q_ld, int gated_silu, int device, void* stream_ptr)
{
    auto stream = static_cast<cudaStream_t>(stream_ptr);
    if (cudaError_t ec = cudaSetDevice(device); ec != cudaSuccess) {
        return fail_cuda("fp8_gemm_sm70: cudaSetDevice", ec);
    }
    if (group_size != 128) {
        return fail("fp8_gemm_sm70: only group_size=128 is supported.");
    }
    if (w_rows != k) {
        return fail("fp8_gemm_sm70: weight shape mismatch.");
    }
    if (s_rows != (k + group_size - 1) / group_size) {
        return fail("fp8_gemm_sm70: scale groups mismatch.");
    }
    if (s_cols != n) {
        return fail("fp8_gemm_sm70: scale shape mismatch.");
    }
    if (out_rows != m) {
        return fail("fp8_gemm_sm70: output rows must match input rows.");
    }
    if (out_stride1 != 1) {
        return fail("fp8_gemm_sm70: output must be row-major contiguous.");
    }
    if (gated_silu) {
        if (n % 2 != 0) {
            return fail("fp8_gemm_sm70: gated_silu requires even output dim.");
        }
        if (out_cols != n / 2) {
            return fail("fp8_gemm_sm70: gated_silu output cols must be n/2.");
        }
    }
    else if (out_cols != n) {
        return fail("fp8_gemm_sm70: output cols must match weight output dim.");
    }
    Layouts l;
    if (!layouts((int)n, (int)k, (int)group_size, l)) {
        return fail("fp8_gemm_sm70: no compatible TurboMind converters.");
    }
    tg::MatrixLayout a{turbomind::kHalf, tg::kRowMajor, (int)m, (int)k, (int)x_stride0};
    tg::MatrixLayout u{};
    tg::MatrixLayout b = l.w_dst;
    b.type             = turbomind::kFloat8_e4m3;
    b.ld               = (int)k_ld;
    tg::MatrixLayout v = l.s_dst;
    v.ld               = (int)q_ld;
    tg::MatrixLayout d{turbomind::kHalf, tg::kRowMajor, (int)m, (int)n, (int)out_stride0};

    std::lock_guard<std::mutex> lock(state_mutex);
    tg::Operation op{};
    op.dispatch  = policy(device, (int)m, (int)n, (int)k, (int)group_size, stream);
    op.epilogue  = gated_silu ? tg::Epilogue::kGatedSilu : tg::Epilogue::kNone;
    op.quant_a   = {tg::QuantType::kNone, 0};
    op.quant_b   = {tg::QuantType::kK, (int)group_size};
    op.batch_dim = 0;
    tg::Workspace* ws = nullptr;
    if (int rc = workspace_for(device, stream, ws)) {
        return rc;
    }
    auto it = gemms.find(device);
    if (it == gemms.end()) {
        it = gemms.emplace(device, new tg::Gemm()).first;
    }
    const int ec = it->second->Run(op, 1.f, x, a, nullptr, u, tm_weight, b, tm_scales, v, 0.f, out, d, out, d, *ws, stream);
    if (ec != 0) {
        return fail("fp8_gemm_sm70: TurboMind GEMM failed.");
    }
    const Fault fault = fault_now();
    if (fault.kind < 0) {
        return fail("fp8_gemm_sm70: unknown FORKPATCH_PTX_FAULT");
    }
    if (fault.kind == 1 || fault.kind == 2) {
        dim3 block(32, 8);
        dim3 grid((unsigned)((out_cols + 31) / 32), (unsigned)((m + 7) / 8));
        fault_output<<<grid, block, 0, stream>>>(static_cast<__half*>(out), (int)m, (int)out_cols, out_stride0, fault);
    }
    if (cudaError_t launch = cudaGetLastError(); launch != cudaSuccess) {
        return fail_cuda("fp8_gemm_sm70", launch);
    }
    return 0;
}

}  // extern "C"
