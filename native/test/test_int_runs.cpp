// Token-id runs: the SIMD paths (AVX-512 VBMI, AVX2) and the scalar one over the same inputs (every msgpack int
// form, malformed and truncated values, runs ending near the buffer's end) must agree on the
// verdict, the first bad position, where the reader stops and what a whole batch decodes to.
#include <cstring>
#include <random>
#include <vector>

#include "check.h"
#include "event_batch.h"
#include "int_runs.h"
#include "msgpack_reader.h"

using namespace kv;

namespace {

std::vector<mp::IntRunPath> paths() {
  std::vector<mp::IntRunPath> p{mp::IntRunPath::Scalar};
  if (mp::int_runs_avx2_supported()) p.push_back(mp::IntRunPath::Avx2);
  else std::printf("note: no AVX2 here, its path is not tested\n");
  if (mp::int_runs_avx512_supported()) p.push_back(mp::IntRunPath::Avx512);
  else std::printf("note: no AVX-512 VBMI here, its path is not tested\n");
  return p;
}

struct PathGuard {
  mp::IntRunPath saved = mp::int_run_path();
  ~PathGuard() { mp::set_int_run_path(saved); }
};

void put_be(std::vector<uint8_t>& o, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i) o.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// One value of form `form` (0..17) holding something near `v`: the four uint32 forms, other
// int forms (holding a uint32 or not), then values that are no int at all.
void put_value(std::vector<uint8_t>& o, int form, uint32_t v) {
  struct Form {
    int tag;  // -1: fixint (the value itself is the byte)
    int bytes;
    uint64_t value;
  };
  const Form forms[] = {
      {-1, 0, v & 0x7f},                        // positive fixint
      {0xcc, 1, v & 0xff},                      // uint8
      {0xcd, 2, v & 0xffff},                    // uint16
      {0xce, 4, v},                             // uint32
      {0xcf, 8, v},                             // uint64 holding a uint32
      {0xcf, 8, uint64_t(1) << 32 | v},         // uint64 past uint32
      {0xd0, 1, v & 0x7f},                      // int8, positive
      {0xd0, 1, 0x80 | (v & 0xff)},             // int8, negative
      {0xd1, 2, v & 0x7fff},                    // int16, positive
      {0xd2, 4, v | 0x80000000u},               // int32, negative
      {0xd3, 8, v},                             // int64, positive
      {-1, 0, 0xe0 | (v & 0x1f)},               // negative fixint
      {-1, 0, 0xc0},                            // nil
      {0xa3, 3, 0x616263},                      // str "abc"
      {0x92, 2, 0x0102},                        // array [1, 2]
      {0xcb, 8, 0x3ff0000000000000ULL},         // float64 1.0
      {-1, 0, 0xc1},                            // the byte msgpack never uses
      {-1, 0, 0xc3},                            // true
  };
  const Form& f = forms[form];
  if (f.tag < 0) {
    o.push_back(static_cast<uint8_t>(f.value));
    return;
  }
  o.push_back(static_cast<uint8_t>(f.tag));
  put_be(o, f.value, f.bytes);
}

void append(std::vector<uint8_t>& o, const char* bytes) {
  o.insert(o.end(), bytes, bytes + std::strlen(bytes));
}

struct Outcome {
  bool ok;
  uint32_t bad;
  size_t pos;
  mp::Fail fail;
  bool operator==(const Outcome& o) const { return ok == o.ok && bad == o.bad && pos == o.pos && fail == o.fail; }
};

Outcome skip_with(mp::IntRunPath path, const std::vector<uint8_t>& buf, size_t start, uint32_t n) {
  mp::set_int_run_path(path);
  mp::Reader r(buf.data() + start, buf.size() - start);
  uint32_t bad = 0xffffffff;
  const bool ok = r.skip_uint32s(n, bad);
  return {ok, ok ? 0 : bad, static_cast<size_t>(r.pos() - buf.data()), r.failure()};
}

// A run of `n` values: mostly the four uint32 forms, with `odd_rate` percent of the others.
std::vector<uint8_t> make_run(std::mt19937& rng, uint32_t n, int odd_rate) {
  std::vector<uint8_t> o;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t v = rng();
    const int form = static_cast<int>(rng() % 100) < odd_rate ? 4 + static_cast<int>(rng() % 14) : rng() % 4;
    put_value(o, form, v);
  }
  return o;
}

}  // namespace

TEST_CASE(int_runs, every_int_form_alone) {
  PathGuard g;
  const auto ps = paths();
  // Each form at every position of a run long enough for several SIMD windows, with the run
  // followed by more data (as token_ids is inside an event) or ending at the buffer's end.
  for (int form = 0; form < 18; ++form) {
    for (uint32_t at : {0u, 1u, 13u, 15u, 16u, 17u, 40u, 63u, 64u, 99u}) {
      for (int tail : {0, 3, 80}) {
        std::vector<uint8_t> buf;
        for (uint32_t i = 0; i < 100; ++i) put_value(buf, i == at ? form : static_cast<int>(i % 4), 70000 + i * 977);
        for (int t = 0; t < tail; ++t) buf.push_back(0xa5);
        const Outcome ref = skip_with(mp::IntRunPath::Scalar, buf, 0, 100);
        for (auto p : ps) CHECK(skip_with(p, buf, 0, 100) == ref);
      }
    }
  }
}

TEST_CASE(int_runs, random_runs_agree) {
  PathGuard g;
  const auto ps = paths();
  std::mt19937 rng(20240611);
  for (int iter = 0; iter < 20000; ++iter) {
    const uint32_t n = rng() % 300;
    std::vector<uint8_t> buf = make_run(rng, n, iter % 3 == 0 ? 0 : static_cast<int>(rng() % 4));
    // Cut it short sometimes (a truncated payload), or let other bytes follow.
    if (iter % 7 == 0 && !buf.empty()) buf.resize(rng() % buf.size());
    else
      for (uint32_t t = rng() % 90; t; --t) buf.push_back(static_cast<uint8_t>(rng()));
    const uint32_t claim = iter % 11 == 0 ? n + rng() % 5 : n;  // a header claiming more values than there are
    const Outcome ref = skip_with(mp::IntRunPath::Scalar, buf, 0, claim);
    for (auto p : ps) CHECK(skip_with(p, buf, 0, claim) == ref);
  }
}

TEST_CASE(int_runs, checked_runs_read_alike) {
  PathGuard g;
  const auto ps = paths();
  std::mt19937 rng(99);
  for (int iter = 0; iter < 20000; ++iter) {
    // Runs that skip_uint32s accepts (the four forms, and other int forms holding a uint32),
    // read by read_checked_uint32s on each path; sometimes ending right at the buffer's end.
    const uint32_t n = rng() % 300;
    std::vector<uint8_t> buf;
    for (uint32_t i = 0; i < n; ++i) {
      const int r = static_cast<int>(rng() % 100);
      put_value(buf, r < 2 ? 4 : r < 4 ? 6 : r < 6 ? 8 : r < 8 ? 10 : static_cast<int>(rng() % 4), rng());
    }
    if (iter % 3)
      for (uint32_t t = rng() % 140; t; --t) buf.push_back(static_cast<uint8_t>(rng()));
    mp::set_int_run_path(mp::IntRunPath::Scalar);
    mp::Reader check(buf.data(), buf.size());
    uint32_t bad = 0;
    CHECK(check.skip_uint32s(n, bad));
    std::vector<uint32_t> ref(n + 1, 0xdeadbeef);
    mp::Reader r0(buf.data(), buf.size());
    r0.read_checked_uint32s(n, ref.data());
    CHECK(r0.pos() == check.pos());
    for (auto p : ps) {
      mp::set_int_run_path(p);
      std::vector<uint32_t> got(n + 1, 0xdeadbeef);
      mp::Reader r(buf.data(), buf.size());
      r.read_checked_uint32s(n, got.data());
      CHECK(got == ref);
      CHECK(r.pos() == r0.pos());
    }
  }
}

TEST_CASE(int_runs, windows_full_of_one_byte_values) {
  PathGuard g;
  const auto ps = paths();
  // 64 fixints fill a SIMD window; runs of them, then a few other forms, then the end.
  for (uint32_t n : {63u, 64u, 65u, 128u, 200u}) {
    std::vector<uint8_t> buf;
    for (uint32_t i = 0; i < n; ++i) put_value(buf, i % 97 == 96 ? 2 : 0, i * 7);
    for (int t = 0; t < 130; ++t) buf.push_back(0xa5);
    const Outcome ref = skip_with(mp::IntRunPath::Scalar, buf, 0, n);
    std::vector<uint32_t> want(n);
    mp::Reader r0(buf.data(), buf.size());
    r0.read_checked_uint32s(n, want.data());
    for (auto p : ps) {
      CHECK(skip_with(p, buf, 0, n) == ref);
      mp::set_int_run_path(p);
      std::vector<uint32_t> got(n);
      mp::Reader r(buf.data(), buf.size());
      r.read_checked_uint32s(n, got.data());
      CHECK(got == want && r.pos() == r0.pos());
    }
  }
}

TEST_CASE(int_runs, batches_decode_alike) {
  PathGuard g;
  const auto ps = paths();
  std::mt19937 rng(7);
  for (int iter = 0; iter < 3000; ++iter) {
    // [ts, [{"type":"BlockStored", block_hashes, parent, token_ids, block_size, lora_id} x k], 0]
    std::vector<uint8_t> p = {0x93, 0xcb, 0x41, 0xd9, 0x54, 0xfc, 0x40, 0x07, 0xdf, 0x3b};
    const int k = 1 + static_cast<int>(rng() % 4);
    p.push_back(static_cast<uint8_t>(0x90 | k));
    for (int e = 0; e < k; ++e) {
      append(p,
             "\x86\xa4type\xab"
             "BlockStored\xac"
             "block_hashes\x91\xcf");
      put_be(p, rng(), 8);
      append(p, "\xb1parent_block_hash\xc0\xa9token_ids\xdc");
      const uint32_t n = rng() % 200;
      put_be(p, n, 2);
      const auto run = make_run(rng, n, iter % 2 ? static_cast<int>(rng() % 3) : 0);
      p.insert(p.end(), run.begin(), run.end());
      append(p,
             "\xaa"
             "block_size\x40\xa7lora_id\xc0");
    }
    p.push_back(0);
    if (iter % 13 == 0) p.resize(rng() % p.size());
    for (bool tokens : {false, true}) {
      mp::set_int_run_path(mp::IntRunPath::Scalar);
      events::Batch ref;
      const bool ok_ref = events::decode_batch(p.data(), p.size(), {}, tokens, ref);
      for (auto path : ps) {
        mp::set_int_run_path(path);
        events::Batch b;
        CHECK_EQ(events::decode_batch(p.data(), p.size(), {}, tokens, b), ok_ref);
        CHECK(b.error == ref.error && b.error_text == ref.error_text);
        CHECK(b.events.size() == ref.events.size() && b.hashes == ref.hashes && b.tokens == ref.tokens);
        CHECK_EQ(b.bad.size(), ref.bad.size());
        for (size_t i = 0; i < b.bad.size() && i < ref.bad.size(); ++i)
          CHECK(b.bad[i].index == ref.bad[i].index && b.bad[i].kind == ref.bad[i].kind &&
                b.bad[i].reason == ref.bad[i].reason);
      }
    }
  }
}
