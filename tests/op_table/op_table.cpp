// The op table's program: each family's rows through the driver (op_test.h), and the
// check that every op record (core/op_records.inc) has a row.
#include <set>

#include "op_table/op_test.h"

using namespace kiln;
using namespace kiln::optable;

namespace {

const std::vector<std::pair<std::string, std::vector<OpTest> (*)()>>& families() {
  static const std::vector<std::pair<std::string, std::vector<OpTest> (*)()>> f = {
      {"normalization", normalization_rows},
      {"pointwise", pointwise_rows},
      {"binary", binary_rows},
      {"reductions", reduction_rows},
      {"softmax", softmax_rows},
      {"matmul", matmul_rows},
      {"losses", loss_rows},
      {"nll_loss", nll_loss_rows},
      {"elementwise losses", elementwise_loss_rows},
      {"std and norm", norm_rows},
      {"structure", structure_rows},
      {"shape", shape_rows},
      {"embedding and fused", embedding_and_fused_rows},
      {"attention and dropout", attention_rows},
      {"in place", inplace_rows},
      {"indexing", indexing_rows},
      {"predicates", predicate_rows},
      {"factories", factory_rows},
      {"random", random_rows},
      {"fused losses", fused_loss_rows},
      {"quantized", quantized_rows},
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
TEST_CASE("op table: nll_loss") { run_table(nll_loss_rows()); }
TEST_CASE("op table: elementwise losses") { run_table(elementwise_loss_rows()); }
TEST_CASE("op table: std and norm") { run_table(norm_rows()); }
TEST_CASE("op table: structure") { run_table(structure_rows()); }
TEST_CASE("op table: shape") { run_table(shape_rows()); }
TEST_CASE("op table: embedding and fused") { run_table(embedding_and_fused_rows()); }
TEST_CASE("op table: attention and dropout") { run_table(attention_rows()); }
TEST_CASE("op table: in place") { run_table(inplace_rows()); }
TEST_CASE("op table: indexing") { run_table(indexing_rows()); }
TEST_CASE("op table: predicates") { run_table(predicate_rows()); }
TEST_CASE("op table: factories") { run_table(factory_rows()); }
TEST_CASE("op table: random") { run_table(random_rows()); }
TEST_CASE("op table: fused losses") { run_table(fused_loss_rows()); }
TEST_CASE("op table: quantized") { run_table(quantized_rows()); }

TEST_CASE("op table: every op record has a row") {
  std::set<std::string> with_rows;
  for (const auto& [family, rows] : families())
    for (const OpTest& t : rows()) with_rows.insert(t.op);
  for (const OpRecord& r : op_records())
    CHECK_MESSAGE(with_rows.count(r.name) == 1, r.name, " has no row in tests/op_table");
}
