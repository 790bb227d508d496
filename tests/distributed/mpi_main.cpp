// main() of the doctest programs that run under mpirun (tests/distributed/meson.build):
// every rank initialises the process group, runs every test case in the same order (each
// rank checks its own results) and returns doctest's status, so that mpirun's exit code
// is non-zero when any rank failed. A rank whose failure leaves the others waiting in a
// collective ends the job through the collectives' deadline (KILN_DISTRIBUTED_TIMEOUT in
// the tests' environment).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include <kiln/kiln.h>

int main(int argc, char** argv) {
  kiln::distributed::init();
  doctest::Context context(argc, argv);
  const int rc = context.run();
  std::fprintf(stderr, "rank %d of %d: %s\n", kiln::distributed::rank(), kiln::distributed::world_size(),
               rc == 0 ? "all checks passed" : "FAILED");
  return rc;
}
