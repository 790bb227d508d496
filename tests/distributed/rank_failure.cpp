// A job in which one rank fails, for rank_failures.py (a rank that throws or
// dies ends the job on every rank within seconds, with a message naming the rank).
//
//   rank_failure kill     the last rank SIGKILLs itself; the others wait in all_reduce
//   rank_failure throw    the last rank throws; run_main (examples/common/cli.h) reports
//                         it and MPI_Abort()s the job
//   rank_failure timeout  the last rank sleeps instead of joining all_reduce; the others'
//                         deadline (KILN_DISTRIBUTED_TIMEOUT) ends the job
//   rank_failure exit     the last rank returns from main early; the same deadline
//   rank_failure ok       every rank joins: exit 0
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include <kiln/kiln.h>

#include "../../examples/common/cli.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  return kiln_examples::run_main("rank_failure", [&] {
    namespace dist = kiln::distributed;
    dist::init();
    const int rank = dist::rank(), last = dist::world_size() - 1;
    dist::barrier();  // every rank is up before one fails
    if (rank == last && last > 0) {
      if (mode == "kill") std::raise(SIGKILL);
      if (mode == "throw") KILN_FAIL("rank_failure", "rank ", rank, " gave up on purpose");
      if (mode == "timeout") std::this_thread::sleep_for(std::chrono::seconds(120));
      if (mode == "exit") return 0;
    }
    kiln::Tensor t = kiln::ones({4});
    dist::all_reduce(t);
    std::printf("rank %d: all_reduce gave %g\n", rank, t.sum().item());
    return 0;
  });
}
