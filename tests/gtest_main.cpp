// gtest_main.cpp — main() of the GoogleTest binaries, with exit codes ctest can tell apart:
//   0   at least one test passed and none failed
//   1   a test failed, or no test was selected (a --gtest_filter that matches nothing)
//   77  every test that ran was skipped (e.g. the GPU suites on a machine without a GPU)
// The ctest entries set SKIP_RETURN_CODE 77 (tests/CMakeLists.txt), so a GPU entry on a
// GPU-less machine reports "Skipped", not "Passed", and ctest still exits 0.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

namespace {
constexpr int kExitAllSkipped = 77;

bool asked_for_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    for (const char* flag : {"--help", "-h", "-?", "/?", "--gtest_help"})
      if (std::strcmp(argv[i], flag) == 0) return true;
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  const bool help = asked_for_help(argc, argv);  // before InitGoogleTest takes the flags out
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  if (status != 0 || help || GTEST_FLAG_GET(list_tests)) return status;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  if (unit.test_to_run_count() == 0) {
    std::fprintf(stderr, "no test selected: the filter '%s' matches none\n",
                 GTEST_FLAG_GET(filter).c_str());
    return 1;
  }
  if (unit.successful_test_count() == 0 && unit.failed_test_count() == 0 &&
      unit.skipped_test_count() > 0) {
    std::fprintf(stderr, "every test that ran was skipped (%d): exit %d\n",
                 unit.skipped_test_count(), kExitAllSkipped);
    return kExitAllSkipped;
  }
  return status;
}
