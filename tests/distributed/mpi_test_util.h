#pragma once
// Helpers of the tests that run under mpirun.
#include <doctest/doctest.h>

#include <kiln/kiln.h>

// Names the rank in every failure message of the enclosing scope.
#define RANK_INFO()                                                                    \
  const int rank_ = ::kiln::distributed::rank();                                       \
  const int world_ = ::kiln::distributed::world_size();                                \
  INFO("rank " << rank_ << " of " << world_)
