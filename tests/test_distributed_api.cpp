// kiln::distributed in one process without mpirun, in every build: what
// config() says about MPI, and the errors before init() or in a Kiln built without MPI.
// The collectives themselves run under mpirun (tests/distributed/).
#include <doctest/doctest.h>

#include <cstdlib>

#include "test_util.h"

using namespace kiln;
namespace dist = kiln::distributed;

namespace {

const char* kNotBuilt =
    "[distributed] Kiln was not built with MPI (install libopenmpi-dev and configure with -Dmpi=enabled)";

std::string mpi_line() {
  std::string c = config();
  size_t at = c.find("  - MPI: ");
  if (at == std::string::npos) return "";
  return c.substr(at, c.find('\n', at) - at);
}

}  // namespace

TEST_CASE("config() has an MPI line that says what was built") {
  std::string line = mpi_line();
  REQUIRE_MESSAGE(!line.empty(), config());
  if (dist::is_available()) {
    CHECK(line.find("(MPI 3.") != std::string::npos);
    // CUDA-aware or not, said either way.
    CHECK(line.find("CUDA") != std::string::npos);
  } else {
    CHECK(line == "  - MPI: not built (install libopenmpi-dev and configure with -Dmpi=enabled)");
  }
}

TEST_CASE("without MPI every call says Kiln was not built with it") {
  if (dist::is_available()) return;  // the MPI build: see the next case
  CHECK_FALSE(dist::is_initialized());
  Tensor t = ones({2});
  std::vector<Tensor> out;
  CHECK(testing::error_of([] { dist::init(); }) == kNotBuilt);
  CHECK(testing::error_of([] { dist::init_process_group("mpi"); }) == kNotBuilt);
  CHECK(testing::error_of([] { (void)dist::rank(); }) == kNotBuilt);
  CHECK(testing::error_of([] { (void)dist::world_size(); }) == kNotBuilt);
  CHECK(testing::error_of([] { dist::barrier(); }) == kNotBuilt);
  CHECK(testing::error_of([&] { dist::all_reduce(t); }) == kNotBuilt);
  CHECK(testing::error_of([&] { (void)dist::all_reduce_async(t); }) == kNotBuilt);
  CHECK(testing::error_of([&] { dist::broadcast(t, 0); }) == kNotBuilt);
  CHECK(testing::error_of([&] { dist::all_gather(out, t); }) == kNotBuilt);
  CHECK(testing::error_of([&] { dist::reduce_scatter(t, {t}); }) == kNotBuilt);
  CHECK(testing::error_of([] { dist::destroy_process_group(); }) == kNotBuilt);
  CHECK_FALSE(dist::is_initialized());
}

TEST_CASE("with MPI, calls before init() say so") {
  if (!dist::is_available()) return;
  CHECK_FALSE(dist::is_initialized());
  Tensor t = ones({2});
  std::vector<Tensor> out;
  const char* not_init = "the process group is not initialized: call kiln::distributed::init() first (under mpirun)";
  CHECK(testing::error_of([] { (void)dist::rank(); }) == std::string("[rank] ") + not_init);
  CHECK(testing::error_of([] { (void)dist::world_size(); }) == std::string("[world_size] ") + not_init);
  CHECK(testing::error_of([] { dist::barrier(); }) == std::string("[barrier] ") + not_init);
  CHECK(testing::error_of([&] { dist::all_reduce(t); }) == std::string("[all_reduce] ") + not_init);
  CHECK(testing::error_of([&] { dist::broadcast(t, 0); }) == std::string("[broadcast] ") + not_init);
  CHECK(testing::error_of([&] { dist::all_gather(out, t); }) == std::string("[all_gather] ") + not_init);
  CHECK(testing::error_of([&] { dist::reduce_scatter(t, {t}); }) == std::string("[reduce_scatter] ") + not_init);
  CHECK(testing::error_of([] { dist::destroy_process_group(); }) ==
        std::string("[destroy_process_group] ") + not_init);
}

TEST_CASE("init_process_group takes the mpi backend only") {
  CHECK_ERROR(dist::init_process_group("nccl"), "[init_process_group] backend 'nccl' is not available",
              "runs on MPI (\"mpi\")");
  CHECK_ERROR(dist::init_process_group("gloo"), "backend 'gloo'");
  CHECK_FALSE(dist::is_initialized());
}

TEST_CASE("launched_by_mpi reads the launcher's environment") {
  // ctest/meson run this without mpirun.
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") ||
                        std::getenv("PMI_SIZE") || std::getenv("PMI_RANK");
  CHECK(dist::launched_by_mpi() == launched);
  CHECK(std::string(dist::reduce_op_name(dist::ReduceOp::kMean)) == "mean");
}

TEST_CASE("KILN_DISTRIBUTED_TIMEOUT: a positive number of seconds, 300 without it") {
  // The value is read until one is accepted, then kept: the bad ones first.
  for (const char* bad : {"abc", "-1", "0", "inf", "nan", "5s", ""}) {
    setenv("KILN_DISTRIBUTED_TIMEOUT", bad, 1);
    const std::string want =
        std::string("[distributed] KILN_DISTRIBUTED_TIMEOUT must be a positive number of seconds, got '") + bad + "'";
    CHECK(testing::error_of([] { (void)dist::timeout_seconds(); }) == want);
  }
  unsetenv("KILN_DISTRIBUTED_TIMEOUT");
  CHECK(dist::timeout_seconds() == 300);
}

TEST_CASE("DistributedDataParallel needs the process group (and MPI)") {
  nn::Linear net(3, 2);
  const std::string got = testing::error_of([&] { nn::parallel::DistributedDataParallel ddp(net); });
  if (dist::is_available()) {
    CHECK(got ==
          "[DistributedDataParallel] the process group is not initialized: call kiln::distributed::init() first "
          "(under mpirun)");
  } else {
    CHECK(got == kNotBuilt);
  }
  CHECK(net.weight.impl()->post_accumulate_grad_hooks.empty());  // nothing left behind
}
