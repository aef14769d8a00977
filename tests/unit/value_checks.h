// Checks of backend outputs against double references, shared by the backend test suites: the
// tolerance rule (relative L2 per tensor) plus the guards that keep a check from passing vacuously.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "reference_ops.h"

namespace dit {

// Every output must be written (the output was NaN-poisoned), finite and not all zero; then the
// relative L2 error against the reference must be within tol. Prints the measured error.
inline void check_values(const std::string& what, const std::vector<float>& got, const ref::Vec& want,
                         double tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0, first_bad = 0;
  bool got_nonzero = false, want_nonzero = false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) && bad++ == 0) first_bad = i;
    got_nonzero |= got[i] != 0.f;
    want_nonzero |= want[i] != 0.0;
  }
  ASSERT_TRUE(want_nonzero) << what << ": the reference is all zero, the check would be vacuous";
  EXPECT_EQ(bad, 0u) << what << ": non-finite or unwritten outputs, the first at " << first_bad;
  EXPECT_TRUE(got_nonzero) << what << ": every output is zero";
  const double err = ref::rel_l2(got, want);
  std::printf("    %-44s rel L2 %.2e  (tol %.0e)\n", what.c_str(), err, tol);
  EXPECT_LE(err, tol) << what;
}

// The q, k and v blocks of a (N, T, 3*H*E) tensor, each checked on its own so that a small
// gradient block is not hidden behind a large one.
inline void check_qkv_blocks(const std::string& what, const std::vector<float>& got, const ref::Vec& want,
                             const ref::AttnShape& s, double tol) {
  const char* names[] = {" dq", " dk", " dv"};
  for (int w = 0; w < 3; ++w) {
    std::vector<float> g;
    ref::Vec r;
    for (ref::i64 row = 0; row < s.n * s.t; ++row)
      for (ref::i64 i = 0; i < s.h * s.e; ++i) {
        g.push_back(got[row * s.width() + w * s.h * s.e + i]);
        r.push_back(want[row * s.width() + w * s.h * s.e + i]);
      }
    check_values(what + names[w], g, r, tol);
  }
}

}  // namespace dit
