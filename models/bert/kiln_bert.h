#pragma once
// The BERT package: configuration, model, sentence embeddings:
// #include <kiln/bert/kiln_bert.h>.
#include "bert.h"
#include "config.h"
#include "sentence_transformer.h"
