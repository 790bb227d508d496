#pragma once
// The small model, optimizer and schedules of the checkpoint fuzz target, shared with the
// seed generator so that the seed checkpoints fit the target's model exactly.
#include <memory>

#include "io/checkpoint.h"

#include "nn/layers.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"

namespace kiln::fuzz {

struct FuzzModel {
  std::shared_ptr<nn::Linear> model;
  std::unique_ptr<optim::Adam> optimizer;
  std::unique_ptr<optim::StepLR> scheduler;
  std::unique_ptr<optim::ReduceLROnPlateau> plateau;

  io::CheckpointParts parts(Generator* gen) {
    return {model.get(), optimizer.get(), scheduler.get(), gen, plateau.get()};
  }

  FuzzModel() : model(std::make_shared<nn::Linear>(3, 2)) {
    optim::AdamOptions o;
    o.lr = 0.01;
    optimizer = std::make_unique<optim::Adam>(model->parameters(), o);
    scheduler = std::make_unique<optim::StepLR>(*optimizer, 2, 0.5);
    plateau = std::make_unique<optim::ReduceLROnPlateau>(*optimizer, optim::ReduceLROnPlateauOptions{.patience = 1});
  }
};

}  // namespace kiln::fuzz
