#pragma once
// Activation checkpointing's header had this name before it was told apart from the
// training checkpoints of io/checkpoint.h and train/checkpoint_manager.h.
#include "activation_checkpoint.h"
