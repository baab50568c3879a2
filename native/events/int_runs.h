// Runs of msgpack integers in the forms that always hold a uint32 (positive fixint, uint8, uint16,
// uint32): a batch's token ids, thousands of them. Stepping over such a run is a chain of
// dependent loads one value at a time in scalar code; the AVX-512 VBMI path finds every value's
// start in 64 bytes at once, and the AVX2 path (hosts without VBMI) in four 16-byte windows. The
// path is chosen at run time (CPUID and the OS's saved vector state) and can be switched, so
// tests run every path the host has over the same inputs.
#pragma once
#include <cstdint>

namespace kv::mp {

enum class IntRunPath { Scalar, Avx2, Avx512 };

bool int_runs_avx2_supported();
bool int_runs_avx512_supported();
IntRunPath int_run_path();
// Returns false (and changes nothing) when the CPU lacks the instructions.
bool set_int_run_path(IntRunPath p);

// Steps `p` over up to `n` values of those four forms and returns how many it stepped over. It
// may stop early, at a value of any other form (valid or not) or near `end` (within 128 bytes:
// each path stops where its window no longer fits); the caller checks the rest. Every value it
// steps over lies wholly before `end`.
uint32_t skip_u32_forms(const uint8_t*& p, const uint8_t* end, uint32_t n);

// The same, reading the values into `out` as it goes: up to `n` of them, stopping early the
// same way. out[returned .. n-1] may be overwritten with scratch, never anything past out[n-1].
uint32_t decode_u32_forms(const uint8_t*& p, const uint8_t* end, uint32_t n, uint32_t* out);

namespace detail {
uint32_t skip_u32_forms_avx2(const uint8_t*& p, const uint8_t* end, uint32_t n);
uint32_t decode_u32_forms_avx2(const uint8_t*& p, const uint8_t* end, uint32_t n, uint32_t* out);
uint32_t skip_u32_forms_avx512(const uint8_t*& p, const uint8_t* end, uint32_t n);
uint32_t decode_u32_forms_avx512(const uint8_t*& p, const uint8_t* end, uint32_t n, uint32_t* out);
}  // namespace detail

}  // namespace kv::mp
