// JS bindings of the page pools and batched copies (src/copy/ is the typed API over these).
// Pools are External handles owning a shared_ptr to their memory; every copy/digest/fill/read/
// write runs as an AsyncWorker (a libuv worker thread) and resolves a Promise. A job holds its
// pools' memory alive, so freeing a pool while a copy is in flight is safely ordered: the pool
// is unusable at once, its memory is released when the last job using it completes.
// Errors are JS Errors with `code` (E_ARG, E_RANGE, E_DUPLICATE, E_LAYOUT, E_DEVICE, E_FREED,
// E_CUDA, E_NOMEM) and, for CUDA failures, `cudaError: { name, code }`.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "args.h"
#include "copy_plan.h"
#include "register.h"
#include "sha256.h"

#ifdef KVCTL_WITH_CUDA
#include "copy_cuda.h"
#endif

using namespace kv::copy;

namespace {

enum class PoolKind { Cpu, CudaDevice, CudaPinned };

const char* kind_name(PoolKind k) {
  return k == PoolKind::Cpu ? "cpu" : k == PoolKind::CudaDevice ? "cuda-device" : "cuda-pinned";
}

using kvglue::kNoCuda;

struct PoolMem {
  PoolKind kind;
  int device = 0;
  uint8_t* ptr = nullptr;
  uint64_t bytes = 0;
  Layout layout;
  uint64_t pages = 0;
  std::atomic<int> in_flight{0};

  ~PoolMem() {
    if (!ptr) return;
    if (kind == PoolKind::Cpu) std::free(ptr);
#ifdef KVCTL_WITH_CUDA
    else if (kind == PoolKind::CudaDevice) cuda::free_device(device, ptr);
    else cuda::free_pinned(ptr);
#endif
  }
};

struct PoolHandle {
  std::shared_ptr<PoolMem> mem;
};

Napi::Error MakeError(Napi::Env env, const Status& st) {
  Napi::Error e = st.code == ErrCode::Range || st.code == ErrCode::Duplicate
                      ? Napi::Error(env, Napi::RangeError::New(env, st.message).Value())
                      : Napi::Error::New(env, st.message);
  e.Set("code", Napi::String::New(env, err_code_name(st.code)));
  if (st.code == ErrCode::Cuda || (st.code == ErrCode::NoMemory && !st.cuda_name.empty())) {
    auto ce = Napi::Object::New(env);
    ce.Set("name", st.cuda_name);
    ce.Set("code", st.cuda_code);
    e.Set("cudaError", ce);
  }
  return e;
}

[[noreturn]] void Throw(Napi::Env env, const Status& st) {
  throw MakeError(env, st);
}
[[noreturn]] void Throw(Napi::Env env, ErrCode c, const std::string& m) {
  Throw(env, Status::Error(c, m));
}

// A job on a worker thread: `work` runs there, `result` builds the resolved value on the JS thread.
class Job : public Napi::AsyncWorker {
 public:
  Job(Napi::Env env, std::vector<std::shared_ptr<PoolMem>> pools, std::function<Status()> work,
      std::function<Napi::Value(Napi::Env)> result)
      : Napi::AsyncWorker(env, "kvctl.copy"),
        deferred_(Napi::Promise::Deferred::New(env)),
        pools_(std::move(pools)),
        work_(std::move(work)),
        result_(std::move(result)) {
    for (auto& p : pools_) p->in_flight++;
  }
  ~Job() override {
    for (auto& p : pools_) p->in_flight--;
  }
  Napi::Promise Promise() const { return deferred_.Promise(); }

 protected:
  void Execute() override {
    try {
      st_ = work_();
    } catch (const std::bad_alloc&) {
      st_ = Status::Error(ErrCode::NoMemory, "out of host memory");
    } catch (const std::exception& ex) {
      st_ = Status::Error(ErrCode::Arg, ex.what());
    }
    if (!st_.ok()) SetError(st_.message);
  }
  void OnOK() override {
    Napi::HandleScope scope(Env());
    try {
      deferred_.Resolve(result_ ? result_(Env()) : Env().Undefined());
    } catch (const Napi::Error& e) {
      deferred_.Reject(e.Value());
    }
  }
  void OnError(const Napi::Error&) override {
    Napi::HandleScope scope(Env());
    deferred_.Reject(MakeError(Env(), st_).Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::vector<std::shared_ptr<PoolMem>> pools_;
  std::function<Status()> work_;
  std::function<Napi::Value(Napi::Env)> result_;
  Status st_;
};

Napi::Promise Queue(Job* job) {
  Napi::Promise p = job->Promise();
  job->Queue();
  return p;
}

uint32_t LayoutField(Napi::Env env, Napi::Object o, const char* name, uint32_t def, bool required) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined()) {
    if (required) Throw(env, ErrCode::Layout, std::string("layout.") + name + " is required");
    return def;
  }
  if (!v.IsNumber()) Throw(env, ErrCode::Layout, std::string("layout.") + name + " must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 0 && d <= 4294967295.0) || d != double(uint64_t(d))) {
    Throw(env, ErrCode::Layout,
          std::string("layout.") + name + " must be an integer in [0, 2^32) (got " + v.ToString().Utf8Value() + ")");
  }
  return uint32_t(d);
}

Layout LayoutArg(Napi::Env env, Napi::Value v) {
  if (!v.IsObject()) Throw(env, ErrCode::Layout, "layout must be an object");
  Napi::Object o = v.As<Napi::Object>();
  Layout L;
  Napi::Value k = o.Get("layout");
  if (!k.IsString() || !parse_layout_kind(k.As<Napi::String>().Utf8Value(), &L.kind)) {
    Throw(env, ErrCode::Layout, "layout.layout must be 'layer_first', 'page_first' or 'page_first_direct'");
  }
  L.page_size = LayoutField(env, o, "pageSize", 0, true);
  L.layers = LayoutField(env, o, "layers", 0, true);
  L.kv = LayoutField(env, o, "kv", 2, false);
  L.heads = LayoutField(env, o, "heads", 0, true);
  L.head_dim = LayoutField(env, o, "headDim", 0, true);
  L.dtype_size = LayoutField(env, o, "dtypeSize", 0, true);
  Status st = validate_layout(L);
  if (!st.ok()) Throw(env, st);
  return L;
}

std::shared_ptr<PoolMem> PoolArg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Env env = info.Env();
  if (!info[i].IsExternal()) Throw(env, ErrCode::Arg, std::string(name) + " must be a pool handle");
  PoolHandle* h = info[i].As<Napi::External<PoolHandle>>().Data();
  if (!h || !h->mem) Throw(env, ErrCode::Freed, std::string(name) + " was freed");
  return h->mem;
}

std::vector<uint32_t> PagesArg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  auto v = kvglue::TypedArg<const uint32_t>(info, i, name, napi_uint32_array, "Uint32Array");
  return std::vector<uint32_t>(v.data, v.data + v.length);
}

uint64_t U64Arg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Env env = info.Env();
  if (!info[i].IsNumber()) Throw(env, ErrCode::Arg, std::string(name) + " must be a number");
  const double d = info[i].As<Napi::Number>().DoubleValue();
  if (!(d >= 0 && d <= 9007199254740991.0) || d != double(uint64_t(d)))
    Throw(env, ErrCode::Range, std::string(name) + " must be a non-negative safe integer");
  return uint64_t(d);
}

Napi::Object LayoutObject(Napi::Env env, const Layout& L) {
  auto o = Napi::Object::New(env);
  o.Set("layout", layout_kind_name(L.kind));
  o.Set("pageSize", L.page_size);
  o.Set("layers", L.layers);
  o.Set("kv", L.kv);
  o.Set("heads", L.heads);
  o.Set("headDim", L.head_dim);
  o.Set("dtypeSize", L.dtype_size);
  return o;
}

// copyLayoutInfo(layout) -> { pageBytes, tokenBytes, segments, segmentBytes }
Napi::Value LayoutInfoFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Layout L = LayoutArg(env, info[0]);
  auto o = Napi::Object::New(env);
  o.Set("pageBytes", double(L.page_bytes()));
  o.Set("tokenBytes", double(L.token_bytes()));
  o.Set("segments", L.segments());
  o.Set("segmentBytes", double(L.segment_bytes()));
  return o;
}

// copyCreatePool(kind, layout, pages, device) -> handle
Napi::Value CreatePoolFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  kvglue::RequireArgs(info, 3, "copyCreatePool");
  if (!info[0].IsString()) Throw(env, ErrCode::Arg, "kind must be 'cpu', 'cuda-device' or 'cuda-pinned'");
  const std::string ks = info[0].As<Napi::String>().Utf8Value();
  PoolKind kind;
  if (ks == "cpu") kind = PoolKind::Cpu;
  else if (ks == "cuda-device") kind = PoolKind::CudaDevice;
  else if (ks == "cuda-pinned") kind = PoolKind::CudaPinned;
  else Throw(env, ErrCode::Arg, "kind must be 'cpu', 'cuda-device' or 'cuda-pinned' (got '" + ks + "')");
  const Layout L = LayoutArg(env, info[1]);
  const uint64_t pages = U64Arg(info, 2, "pages");
  const int device = info.Length() > 3 && !info[3].IsUndefined() ? int(U64Arg(info, 3, "device")) : 0;
  Status st = validate_pool(L, pages);
  if (!st.ok()) Throw(env, st);
  auto mem = std::make_shared<PoolMem>();
  mem->kind = kind;
  mem->device = kind == PoolKind::Cpu ? -1 : device;
  mem->layout = L;
  mem->pages = pages;
  mem->bytes = pages * L.page_bytes();
  if (kind == PoolKind::Cpu) {
    mem->ptr = static_cast<uint8_t*>(std::calloc(1, mem->bytes));
    if (!mem->ptr)
      Throw(env, ErrCode::NoMemory, "cannot allocate a cpu pool of " + std::to_string(mem->bytes) + " bytes");
  } else {
#ifdef KVCTL_WITH_CUDA
    void* p = nullptr;
    st = kind == PoolKind::CudaDevice ? cuda::alloc_device(device, mem->bytes, &p)
                                      : cuda::alloc_pinned(device, mem->bytes, &p);
    if (!st.ok()) Throw(env, st);
    mem->ptr = static_cast<uint8_t*>(p);
#else
    Throw(env, ErrCode::Device, std::string("cannot create a ") + kind_name(kind) + " pool: " + kNoCuda);
#endif
  }
  return Napi::External<PoolHandle>::New(env, new PoolHandle{std::move(mem)},
                                         [](Napi::Env, PoolHandle* h) { delete h; });
}

// copyFreePool(handle): the pool is unusable at once; its memory goes when no job holds it.
Napi::Value FreePoolFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsExternal()) Throw(env, ErrCode::Arg, "pool must be a pool handle");
  PoolHandle* h = info[0].As<Napi::External<PoolHandle>>().Data();
  const bool had = h && h->mem;
  int pending = had ? h->mem->in_flight.load() : 0;
  if (h) h->mem.reset();
  auto o = Napi::Object::New(env);
  o.Set("freed", had);
  o.Set("deferredForJobs", pending);
  return o;
}

// copyPoolInfo(handle) -> { kind, device, pages, bytes, pageBytes, layout, inFlight } | { freed: true }
Napi::Value PoolInfoFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsExternal()) Throw(env, ErrCode::Arg, "pool must be a pool handle");
  PoolHandle* h = info[0].As<Napi::External<PoolHandle>>().Data();
  auto o = Napi::Object::New(env);
  if (!h || !h->mem) {
    o.Set("freed", true);
    return o;
  }
  const PoolMem& m = *h->mem;
  o.Set("freed", false);
  o.Set("kind", kind_name(m.kind));
  o.Set("device", m.device);
  o.Set("pages", double(m.pages));
  o.Set("bytes", double(m.bytes));
  o.Set("pageBytes", double(m.layout.page_bytes()));
  o.Set("layout", LayoutObject(env, m.layout));
  o.Set("inFlight", m.in_flight.load());
  return o;
}

Status CheckPair(const PoolMem& s, const PoolMem& d) {
  const bool sc = s.kind == PoolKind::Cpu, dc = d.kind == PoolKind::Cpu;
  if (sc != dc) {
    return Status::Error(ErrCode::Device, std::string("cannot copy between a ") + kind_name(s.kind) + " pool and a " +
                                              kind_name(d.kind) +
                                              " pool: cpu pools (the CPU twin) copy only to cpu pools");
  }
  if (s.kind == PoolKind::CudaDevice && d.kind == PoolKind::CudaDevice && s.device != d.device) {
    return Status::Error(ErrCode::Device, "pools are on different CUDA devices (" + std::to_string(s.device) + " and " +
                                              std::to_string(d.device) + ")");
  }
  return {};
}

const char* gran_name(Gran g) {
  return g == Gran::Native ? "native" : g == Gran::Row ? "row" : "token";
}

// copyPages(src, dst, srcPages, dstPages, coalesceMinPages) -> Promise<stats>
Napi::Value CopyPagesFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  kvglue::RequireArgs(info, 4, "copyPages");
  auto src = PoolArg(info, 0, "src");
  auto dst = PoolArg(info, 1, "dst");
  auto sp = PagesArg(info, 2, "srcPages");
  auto dp = PagesArg(info, 3, "dstPages");
  PlanOptions opt;
  if (info.Length() > 4 && !info[4].IsUndefined())
    opt.coalesce_min_pages = uint32_t(U64Arg(info, 4, "coalesceMinPages"));
  Status st = CheckPair(*src, *dst);
  if (!st.ok()) Throw(env, st);
  auto plan = std::make_shared<CopyPlan>();
  st = plan_copy(src->layout, src->pages, dst->layout, dst->pages, sp.data(), sp.size(), dp.data(), dp.size(),
                 src.get() == dst.get(), opt, plan.get());
  if (!st.ok()) Throw(env, st);
  auto seconds = std::make_shared<double>(0);
  int exec_dev = dst->kind == PoolKind::CudaDevice ? dst->device : src->device;
  auto work = [src, dst, plan, seconds, exec_dev]() -> Status {
    const auto t0 = std::chrono::steady_clock::now();
    Status s;
    if (src->kind == PoolKind::Cpu) {
      cpu_execute(*plan, src->ptr, src->layout, src->pages, dst->ptr, dst->layout, dst->pages);
    } else {
#ifdef KVCTL_WITH_CUDA
      s = cuda::execute(exec_dev, *plan, src->ptr, src->layout, src->pages, dst->ptr, dst->layout, dst->pages);
#else
      (void)exec_dev;
      s = Status::Error(ErrCode::Device, kNoCuda);
#endif
    }
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
  };
  auto result = [plan, seconds](Napi::Env e) -> Napi::Value {
    auto o = Napi::Object::New(e);
    o.Set("pages", double(plan->pages));
    o.Set("bytes", double(plan->bytes));
    o.Set("runs", double(plan->runs.size()));
    o.Set("coalescedPages", double(plan->coalesced_pages()));
    o.Set("kernelPages", double(plan->kern_src.size()));
    o.Set("granularity", gran_name(plan->gran));
    o.Set("seconds", *seconds);
    return o;
  };
  return Queue(new Job(env, {src, dst}, work, result));
}

// copyDigests(pool, pages, engine: "auto"|"cpu"|"gpu") -> Promise<Buffer(32 * n)>
Napi::Value DigestsFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  kvglue::RequireArgs(info, 2, "copyDigests");
  auto pool = PoolArg(info, 0, "pool");
  auto pages = std::make_shared<std::vector<uint32_t>>(PagesArg(info, 1, "pages"));
  std::string engine = "auto";
  if (info.Length() > 2 && info[2].IsString()) engine = info[2].As<Napi::String>().Utf8Value();
  if (engine != "auto" && engine != "cpu" && engine != "gpu")
    Throw(env, ErrCode::Arg, "engine must be 'auto', 'cpu' or 'gpu'");
  Status st = check_pages(pages->data(), pages->size(), pool->pages, "pages");
  if (!st.ok()) Throw(env, st);
  kvglue::CheckOutputBytes(env, uint64_t(pages->size()) * 32, "copyDigests");
  bool gpu = engine == "gpu" || (engine == "auto" && pool->kind == PoolKind::CudaDevice);
  if (gpu && pool->kind == PoolKind::Cpu) Throw(env, ErrCode::Device, "a cpu pool has no GPU digests (engine 'gpu')");
  auto out = std::make_shared<std::vector<uint8_t>>(pages->size() * 32);
  auto work = [pool, pages, out, gpu]() -> Status {
    const Layout& L = pool->layout;
    if (!gpu && pool->kind != PoolKind::CudaDevice) {
      cpu_digests(L, pool->ptr, pool->pages, pages->data(), pages->size(), out->data());
      return {};
    }
#ifdef KVCTL_WITH_CUDA
    if (gpu) return cuda::digests(pool->device, L, pool->ptr, pool->pages, pages->data(), pages->size(), out->data());
    // CPU digests of a device pool: each page's native segments into a one-page host buffer
    // (which is a one-page pool of the same layout), hashed by the core.
    std::vector<uint8_t> page(L.page_bytes());
    const uint32_t zero = 0;
    for (size_t i = 0; i < pages->size(); ++i) {
      for (uint64_t s = 0; s < L.segments(); ++s) {
        Status cs = cuda::copy_bytes(pool->device, page.data() + segment_offset(L, 1, 0, s),
                                     pool->ptr + segment_offset(L, pool->pages, (*pages)[i], s), L.segment_bytes());
        if (!cs.ok()) return cs;
      }
      cpu_digests(L, page.data(), 1, &zero, 1, out->data() + 32 * i);
    }
    return {};
#else
    return Status::Error(ErrCode::Device, kNoCuda);
#endif
  };
  auto result = [out](Napi::Env e) -> Napi::Value { return Napi::Buffer<uint8_t>::Copy(e, out->data(), out->size()); };
  return Queue(new Job(env, {pool}, work, result));
}

// copyFill(pool, seed) -> Promise<void>: deterministic contents (layout_pool.h fill_word).
Napi::Value FillFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  kvglue::RequireArgs(info, 2, "copyFill");
  auto pool = PoolArg(info, 0, "pool");
  const uint64_t seed = U64Arg(info, 1, "seed");
  auto work = [pool, seed]() -> Status {
    if (pool->kind != PoolKind::CudaDevice) {
      cpu_fill(pool->ptr, pool->bytes, seed);
      return {};
    }
#ifdef KVCTL_WITH_CUDA
    return cuda::fill(pool->device, pool->ptr, pool->bytes, seed);
#else
    return Status::Error(ErrCode::Device, kNoCuda);
#endif
  };
  return Queue(new Job(env, {pool}, work, nullptr));
}

Status RawCopy(const PoolMem& pool, void* dst, const void* src, uint64_t n) {
  if (pool.kind != PoolKind::CudaDevice) {
    std::memcpy(dst, src, n);
    return {};
  }
#ifdef KVCTL_WITH_CUDA
  return cuda::copy_bytes(pool.device, dst, src, n);
#else
  return Status::Error(ErrCode::Device, kNoCuda);
#endif
}

void CheckSpan(Napi::Env env, const PoolMem& pool, uint64_t off, uint64_t len) {
  if (off > pool.bytes || len > pool.bytes - off) {
    Throw(env, ErrCode::Range,
          "bytes [" + std::to_string(off) + ", " + std::to_string(off + len) + ") are past the pool (" +
              std::to_string(pool.bytes) + " bytes)");
  }
}

// copyRead(pool, offset, length) -> Promise<Buffer>
Napi::Value ReadFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  kvglue::RequireArgs(info, 3, "copyRead");
  auto pool = PoolArg(info, 0, "pool");
  const uint64_t off = U64Arg(info, 1, "offset"), len = U64Arg(info, 2, "length");
  CheckSpan(env, *pool, off, len);
  kvglue::CheckOutputBytes(env, len, "copyRead");
  auto out = std::make_shared<std::vector<uint8_t>>(len);
  auto work = [pool, off, len, out]() -> Status { return RawCopy(*pool, out->data(), pool->ptr + off, len); };
  auto result = [out](Napi::Env e) -> Napi::Value { return Napi::Buffer<uint8_t>::Copy(e, out->data(), out->size()); };
  return Queue(new Job(env, {pool}, work, result));
}

// copyWrite(pool, offset, data) -> Promise<void> (data is copied before the call returns)
Napi::Value WriteFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  kvglue::RequireArgs(info, 3, "copyWrite");
  auto pool = PoolArg(info, 0, "pool");
  const uint64_t off = U64Arg(info, 1, "offset");
  auto data = kvglue::BytesArg(info, 2, "data");
  CheckSpan(env, *pool, off, data.length);
  auto buf = std::make_shared<std::vector<uint8_t>>(data.data, data.data + data.length);
  auto work = [pool, off, buf]() -> Status { return RawCopy(*pool, pool->ptr + off, buf->data(), buf->size()); };
  return Queue(new Job(env, {pool}, work, nullptr));
}

// copyMemcpyBaseline(backend "cpu"|"cuda", bytes, direction "d2h"|"h2d", iters, device) -> Promise<seconds>
Napi::Value MemcpyBaselineFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  kvglue::RequireArgs(info, 4, "copyMemcpyBaseline");
  const std::string backend = info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
  if (backend != "cpu" && backend != "cuda") Throw(env, ErrCode::Arg, "backend must be 'cpu' or 'cuda'");
  const uint64_t bytes = U64Arg(info, 1, "bytes");
  const std::string dir = info[2].IsString() ? info[2].As<Napi::String>().Utf8Value() : "";
  if (dir != "d2h" && dir != "h2d") Throw(env, ErrCode::Arg, "direction must be 'd2h' or 'h2d'");
  const uint32_t iters = uint32_t(U64Arg(info, 3, "iters"));
  const int device = info.Length() > 4 && !info[4].IsUndefined() ? int(U64Arg(info, 4, "device")) : 0;
  if (bytes == 0) Throw(env, ErrCode::Range, "bytes must be >= 1");
  auto seconds = std::make_shared<double>(0);
  auto work = [backend, bytes, dir, iters, device, seconds]() -> Status {
    if (backend == "cpu") {
      *seconds = cpu_memcpy_baseline(bytes, iters);
      return {};
    }
#ifdef KVCTL_WITH_CUDA
    return cuda::bench_memcpy(device, bytes, dir == "d2h", iters, seconds.get());
#else
    (void)device;
    return Status::Error(ErrCode::Device, kNoCuda);
#endif
  };
  auto result = [seconds](Napi::Env e) -> Napi::Value { return Napi::Number::New(e, *seconds); };
  return Queue(new Job(env, {}, work, result));
}

// buildInfo() -> what this addon was built with and what it finds at run time.
Napi::Value BuildInfoFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto o = Napi::Object::New(env);
  auto sha = Napi::Object::New(env);
  sha.Set("shaNi", kv::sha256_shani_supported());
  sha.Set("backend", kv::sha256_backend_name(kv::sha256_backend()));
  o.Set("sha256", sha);
  o.Set("napiVersion", NAPI_VERSION);
#if defined(__clang__)
  o.Set("compiler", std::string("clang ") + __clang_version__);
#elif defined(__GNUC__)
  o.Set("compiler", std::string("gcc ") + __VERSION__);
#endif
  auto layouts = Napi::Array::New(env, 3);
  layouts.Set(0u, "layer_first");
  layouts.Set(1u, "page_first");
  layouts.Set(2u, "page_first_direct");
  o.Set("layouts", layouts);
  auto c = Napi::Object::New(env);
#ifdef KVCTL_WITH_CUDA
  cuda::RuntimeInfo ri = cuda::runtime_info();
  c.Set("built", true);
  c.Set("runtimeVersion", ri.runtime_version);
  c.Set("driverVersion", ri.driver_version);
  c.Set("deviceCount", ri.device_count);
  c.Set("available", ri.status.ok() && ri.device_count > 0);
  if (!ri.status.ok()) {
    auto e = Napi::Object::New(env);
    e.Set("name", ri.status.cuda_name);
    e.Set("code", ri.status.cuda_code);
    e.Set("message", ri.status.message);
    c.Set("error", e);
  }
  auto devs = Napi::Array::New(env, ri.devices.size());
  for (size_t i = 0; i < ri.devices.size(); ++i) {
    const auto& d = ri.devices[i];
    auto dv = Napi::Object::New(env);
    dv.Set("index", d.index);
    dv.Set("name", d.name);
    dv.Set("pciBusId", d.pci_bus_id);
    dv.Set("computeCapability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor));
    dv.Set("totalBytes", double(d.total_bytes));
    dv.Set("freeBytes", double(d.free_bytes));
    dv.Set("smCount", d.sm_count);
    devs.Set(uint32_t(i), dv);
  }
  c.Set("devices", devs);
#else
  c.Set("built", false);
  c.Set("available", false);
  c.Set("runtimeVersion", 0);
  c.Set("driverVersion", 0);
  c.Set("deviceCount", 0);
  c.Set("devices", Napi::Array::New(env, 0));
  auto e = Napi::Object::New(env);
  e.Set("name", "notBuilt");
  e.Set("code", 0);
  e.Set("message", kNoCuda);
  c.Set("error", e);
#endif
  o.Set("cuda", c);
  return o;
}

}  // namespace

void RegisterCopy(Napi::Env env, Napi::Object exports) {
  exports.Set("copyLayoutInfo", Napi::Function::New(env, LayoutInfoFn, "copyLayoutInfo"));
  exports.Set("copyCreatePool", Napi::Function::New(env, CreatePoolFn, "copyCreatePool"));
  exports.Set("copyFreePool", Napi::Function::New(env, FreePoolFn, "copyFreePool"));
  exports.Set("copyPoolInfo", Napi::Function::New(env, PoolInfoFn, "copyPoolInfo"));
  exports.Set("copyPages", Napi::Function::New(env, CopyPagesFn, "copyPages"));
  exports.Set("copyDigests", Napi::Function::New(env, DigestsFn, "copyDigests"));
  exports.Set("copyFill", Napi::Function::New(env, FillFn, "copyFill"));
  exports.Set("copyRead", Napi::Function::New(env, ReadFn, "copyRead"));
  exports.Set("copyWrite", Napi::Function::New(env, WriteFn, "copyWrite"));
  exports.Set("copyMemcpyBaseline", Napi::Function::New(env, MemcpyBaselineFn, "copyMemcpyBaseline"));
  exports.Set("buildInfo", Napi::Function::New(env, BuildInfoFn, "buildInfo"));
}
