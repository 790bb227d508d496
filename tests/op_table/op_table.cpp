// The op table's program: each family's rows through the driver (op_test.h), and the
// check that every op record (core/op_records.inc) has a row, bar the ones still tested
// by hand elsewhere (kNotYetMigrated, which may only shrink).
#include <map>
#include <set>

#include "op_table/op_test.h"

using namespace kiln;
using namespace kiln::optable;

namespace {

// Records without a row yet, each with the test file that still covers it. Moving an op
// into the table removes it here (the check below fails while it is in both).
const std::map<std::string, std::string> kNotYetMigrated = {
    {"empty", "test_tensor.cpp"},
    {"zeros", "test_tensor.cpp"},
    {"ones", "test_tensor.cpp"},
    {"full", "test_tensor.cpp"},
    {"zeros_like", "test_tensor.cpp"},
    {"ones_like", "test_tensor.cpp"},
    {"full_like", "test_tensor.cpp"},
    {"empty_like", "test_tensor.cpp"},
    {"arange", "test_ops_forward.cpp"},
    {"eye", "test_ops_forward.cpp"},
    {"scalar_tensor", "test_tensor.cpp"},
    {"tensor", "test_tensor.cpp"},
    {"rand", "test_tensor.cpp"},
    {"randn", "test_tensor.cpp"},
    {"randint", "test_index_ops.cpp"},
    {"bernoulli", "test_tensor.cpp"},
    {"multinomial", "test_index_ops.cpp"},
    {"linear_cross_entropy", "test_linear_cross_entropy.cpp"},
    {"uniform_", "test_tensor.cpp"},
    {"normal_", "test_tensor.cpp"},
    {"quantize_matrix", "test_quantized.cpp"},
    {"dequantize", "test_quantized.cpp"},
    {"quantized_linear", "test_quantized.cpp"},
};

const std::vector<std::pair<std::string, std::vector<OpTest> (*)()>>& families() {
  static const std::vector<std::pair<std::string, std::vector<OpTest> (*)()>> f = {
      {"normalization", normalization_rows},
      {"pointwise", pointwise_rows},
      {"binary", binary_rows},
      {"reductions", reduction_rows},
      {"softmax", softmax_rows},
      {"matmul", matmul_rows},
      {"losses", loss_rows},
      {"std and norm", norm_rows},
      {"structure", structure_rows},
      {"shape", shape_rows},
      {"embedding and fused", embedding_and_fused_rows},
      {"attention and dropout", attention_rows},
      {"in place", inplace_rows},
      {"indexing", indexing_rows},
      {"predicates", predicate_rows},
  };
  return f;
}

}  // namespace

TEST_CASE("op table: normalization") { run_table(normalization_rows()); }
TEST_CASE("op table: pointwise") { run_table(pointwise_rows()); }
TEST_CASE("op table: binary") { run_table(binary_rows()); }
TEST_CASE("op table: reductions") { run_table(reduction_rows()); }
TEST_CASE("op table: softmax") { run_table(softmax_rows()); }
TEST_CASE("op table: matmul") { run_table(matmul_rows()); }
TEST_CASE("op table: losses") { run_table(loss_rows()); }
TEST_CASE("op table: std and norm") { run_table(norm_rows()); }
TEST_CASE("op table: structure") { run_table(structure_rows()); }
TEST_CASE("op table: shape") { run_table(shape_rows()); }
TEST_CASE("op table: embedding and fused") { run_table(embedding_and_fused_rows()); }
TEST_CASE("op table: attention and dropout") { run_table(attention_rows()); }
TEST_CASE("op table: in place") { run_table(inplace_rows()); }
TEST_CASE("op table: indexing") { run_table(indexing_rows()); }
TEST_CASE("op table: predicates") { run_table(predicate_rows()); }

TEST_CASE("op table: every op record has a row, or is listed as not yet migrated") {
  std::set<std::string> with_rows;
  for (const auto& [family, rows] : families())
    for (const OpTest& t : rows()) with_rows.insert(t.op);
  std::set<std::string> records;
  for (const OpRecord& r : op_records()) records.insert(r.name);
  for (const std::string& name : records) {
    const auto listed = kNotYetMigrated.find(name);
    if (listed == kNotYetMigrated.end())
      CHECK_MESSAGE(with_rows.count(name) == 1, name, " has no row in tests/op_table (nor is it listed in kNotYetMigrated)");
    else
      CHECK_MESSAGE(with_rows.count(name) == 0, name, " has rows: remove it from kNotYetMigrated (and its old checks from ",
                    listed->second, ")");
  }
  for (const auto& entry : kNotYetMigrated)  // not a structured binding: CHECK_MESSAGE's lambda takes it
    CHECK_MESSAGE(records.count(entry.first) == 1, entry.first, " is listed in kNotYetMigrated but has no record");
}
