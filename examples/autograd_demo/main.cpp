// A first taste of Kiln: fit y = 3x - 2 with a hand-written linear model and autograd.
#include <cstdio>
#include <iostream>

#include <kiln/kiln.h>

#include "../common/cli.h"

namespace {

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv, "autograd_demo (no flags)");
  cli.finish();
  using namespace kiln;
  std::printf("%s\n", config().c_str());
  manual_seed(0);
  Tensor x = randn({64, 1});
  Tensor y = x * 3.0 - 2.0;
  Tensor w = zeros({1, 1}, TensorOptions().requires_grad());
  Tensor b = zeros({1}, TensorOptions().requires_grad());
  for (int step = 0; step <= 100; ++step) {
    Tensor loss = mean(pow(matmul(x, w) + b - y, 2.0));
    loss.backward();
    {
      NoGradGuard no_grad;
      w.sub_(w.grad(), 0.1);
      b.sub_(b.grad(), 0.1);
    }
    w.zero_grad();
    b.zero_grad();
    if (step % 20 == 0) std::printf("step %3d  loss %.6f\n", step, loss.item());
  }
  std::printf("learned w = %.4f (want 3), b = %.4f (want -2)\n", w.item(), b.item());
  std::cout << "w: " << w << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln_examples::run_main("autograd_demo", [&] { return run(argc, argv); });
}
