// A two-layer perceptron learns XOR: the smallest problem a linear model cannot solve.
//   xor [--seed S] [--epochs N]
#include <cstdio>
#include <memory>
#include <string>

#include <kiln/kiln.h>

#include "../common/cli.h"

namespace {

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv, "xor [--seed S] [--epochs N]");
  const uint64_t seed = static_cast<uint64_t>(cli.integer("--seed", 0, 0, INT64_MAX));
  const int epochs = static_cast<int>(cli.integer("--epochs", 500, 1, 1'000'000));
  cli.finish();
  kiln::manual_seed(seed);
  kiln::Tensor x = kiln::tensor({{0.0, 0.0}, {0.0, 1.0}, {1.0, 0.0}, {1.0, 1.0}});
  kiln::Tensor y = kiln::from_vector<int64_t>({0, 1, 1, 0}, {4});

  auto model = std::make_shared<kiln::nn::Sequential>();
  model->push_back(std::make_shared<kiln::nn::Linear>(2, 8));
  model->push_back(std::make_shared<kiln::nn::ReLU>());
  model->push_back(std::make_shared<kiln::nn::Linear>(8, 2));
  std::printf("%s\n", model->str().c_str());
  kiln::optim::AdamOptions o;
  o.lr = 0.05;
  kiln::optim::Adam optimizer(model->parameters(), o);
  kiln::nn::CrossEntropyLoss loss_fn;

  for (int epoch = 1; epoch <= epochs; ++epoch) {
    kiln::Tensor loss = loss_fn(model->forward(x), y);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    if (epoch % 100 == 0) std::printf("epoch %4d  loss %.5f\n", epoch, loss.item());
  }
  kiln::NoGradGuard no_grad;
  kiln::Tensor predicted = kiln::argmax(model->forward(x), 1);
  int correct = 0;
  for (int i = 0; i < 4; ++i) {
    int a = static_cast<int>(x.at({i, 0})), b = static_cast<int>(x.at({i, 1}));
    int p = static_cast<int>(predicted.at({i}));
    correct += p == (a ^ b);
    std::printf("%d xor %d -> %d\n", a, b, p);
  }
  std::printf("accuracy: %d/4\n", correct);
  return correct == 4 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln_examples::run_main("xor", [&] { return run(argc, argv); });
}
