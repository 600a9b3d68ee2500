// The command-line value parsers the trainer, predict and bench_train share (models/cli.h), and
// the one rule for the engine's environment switches: unset or empty is the default, anything
// else must be a name the switch knows.
#include <cstdlib>
#include <string>

#include "catch2/catch.hpp"
#include "models/cli.h"

using Catch::Contains;

TEST_CASE("cli: integers parse whole, within their bounds", "[cli]") {
  CHECK(models::parse_int("--batch", "256", 1) == 256);
  CHECK(models::parse_int("--rounds", "1000", 1, 1000) == 1000);
  CHECK(models::parse_int("--seed", "0", 0) == 0);
  for (const char* bad : {"0", "-1", "big", "", "2x", "1.5", " 3", "99999999999999999999"})
    CHECK_THROWS_WITH(models::parse_int("--batch", bad, 1),
                      Contains("--batch expects an integer >= 1, got '" + std::string(bad) + "'"));
  CHECK_THROWS_WITH(models::parse_int("--threads", "4097", 1, 4096),
                    Contains("--threads expects an integer from 1 to 4096, got '4097'"));
}

TEST_CASE("cli: numbers are finite and above their bound", "[cli]") {
  CHECK(models::parse_number("--lr", "1e-3", 0, true) == 1e-3);
  CHECK(models::parse_number("--momentum", "0", 0, false) == 0);
  for (const char* bad : {"0", "-1", "inf", "nan", "1e999", "", "0.1x", " 1", "\t1"})
    CHECK_THROWS_WITH(models::parse_number("--lr", bad, 0, true), Contains("--lr expects a number > 0"));
}

TEST_CASE("cli: choices and lists refuse what they do not name", "[cli]") {
  CHECK(models::parse_choice("--precision", "bf16", {"fp32", "fp16", "bf16"}) == "bf16");
  CHECK_THROWS_WITH(models::parse_choice("--precision", "fp8", {"fp32", "fp16", "bf16"}),
                    Contains("--precision must be one of fp32, fp16, bf16, got 'fp8'"));
  CHECK(models::parse_list("--models", "simplecnn") == std::vector<std::string>{"simplecnn"});
  CHECK(models::parse_list("--models", "a,b") == std::vector<std::string>{"a", "b"});
  for (const char* bad : {"", ",", "a,", ",a", "a,,b"})
    CHECK_THROWS_WITH(models::parse_list("--models", bad), Contains("--models expects a comma-separated list"));
}

TEST_CASE("cli: sizes in bytes are finite, positive and fit int64 arithmetic", "[cli]") {
  CHECK(models::parse_bytes("--max-batch-under", "80GiB") == int64_t(80) << 30);
  CHECK(models::parse_bytes("--max-batch-under", "512MiB") == int64_t(512) << 20);
  CHECK(models::parse_bytes("--max-batch-under", "4KiB") == 4096);
  CHECK(models::parse_bytes("--max-batch-under", "8e10") == int64_t(80000000000));
  CHECK(models::parse_bytes("--max-batch-under", "1.5GB") == int64_t(1500000000));
  // 1e999GiB was taken as infinity and converted to an integer (undefined behaviour) before.
  for (const char* bad : {"1e999GiB", "inf", "nan", "0", "-1GiB", "0.5", "GiB", "", "80gib", "80 GiB", " 80GiB", "1e30"})
    CHECK_THROWS_WITH(models::parse_bytes("--max-batch-under", bad),
                      Contains("--max-batch-under expects a size like 80GiB") && Contains(bad));
}

namespace {

// Sets one environment variable for a scope (nullptr: unset), restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace

TEST_CASE("cli: every environment switch follows one rule: empty is unset, a bad name is refused", "[cli]") {
  ScopedEnv isa("ENGINE_CPU_ISA", nullptr), path("ENGINE_INT8_PATH", nullptr), log("ENGINE_CUDNN_LOG", nullptr);
  CHECK(models::environment_error().empty());
  for (const char* name : {"ENGINE_CPU_ISA", "ENGINE_INT8_PATH", "ENGINE_CUDNN_LOG"}) {
    INFO(name);
    {
      ScopedEnv empty(name, "");
      CHECK(models::environment_error().empty());
    }
    ScopedEnv bad(name, "avx9");
    const std::string why = models::environment_error();
    CHECK_THAT(why, Contains(std::string(name)) && Contains("avx9"));
  }
  {
    ScopedEnv ok("ENGINE_CPU_ISA", "generic");
    CHECK(models::environment_error().empty());
  }
  {
    ScopedEnv ok("ENGINE_INT8_PATH", "generic");  // the portable loops run everywhere
    CHECK(models::environment_error().empty());
  }
  {
    ScopedEnv ok("ENGINE_CUDNN_LOG", "1");
    CHECK(models::environment_error().empty());
  }
}
