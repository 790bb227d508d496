// Rows of embedding and the fused add_layer_norm (add_layer_norm_with_sum): embedding's
// rows against PyTorch (ops_forward.txt, made by make_op_fixtures.py), and generated
// inputs in every layout for gradcheck and the CUDA backend. Indices are constants
// captured by the rows, on the weight's device. (add_layer_norm against its composition
// is in test_fusions.cpp.)
#include "op_table/op_test.h"

namespace kiln::optable {
namespace {


Tensor ids(const std::vector<int64_t>& v, const Shape& s, const Tensor& like) {
  return from_vector<int64_t>(v, s).to(like.device());
}
Tensor rows_mask(const std::vector<double>& v, const Tensor& like) {
  return ne(from_vector<double>(v, {static_cast<int64_t>(v.size()), 1}), 0.0).to(like.device());
}

std::vector<OpTest> embedding_rows() {
  // (2, 3) indices with repeats; padding_idx changes no value
  auto idx = [](const Tensor& w) { return fixture("ops_forward.txt", "emb.idx").to(w.device()); };
  std::vector<OpTest> rows;
  for (const bool pad : {false, true})
    rows.push_back({.op = "embedding",
                    .sample = pad ? "(2, 3) indices, padding_idx 3" : "(2, 3) indices",
                    .fn = [idx, pad](V x) { return pad ? embedding(x[0], idx(x[0]), 3) : embedding(x[0], idx(x[0])); },
                    .inputs = {"emb.{t}.w"},
                    .expected = "emb.{t}.out",
                    .file = "ops_forward.txt",
                    // The indices read row 3, which as the padding row gets no gradient (as
                    // torch): central differences see it (the masked rows below gradcheck).
                    .gradcheck = !pad,
                    .zero_size = false});  // a weight without rows has none for the indices
  auto i23 = [](const Tensor& w) { return ids({0, 2, 4, 2, 1, 0}, {2, 3}, w); };  // repeats accumulate
  auto i3 = [](const Tensor& w) { return ids({3, 3, 1}, {3}, w); };
  // The padding row is read forward but gets no gradient (PyTorch's semantics; the
  // exact zero is checked in test_gradcheck.cpp), so against central differences it is
  // held constant: a masked_fill makes it so, and the check covers the other rows'
  // gradients in its presence.
  std::vector<OpTest> more = {
      made("embedding", "(5, 3) by (2, 3)", [i23](V x) { return embedding(x[0], i23(x[0])); }, {R({5, 3})}),
      made("embedding", "1-D indices", [i3](V x) { return embedding(x[0], i3(x[0])); }, {R({4, 2})}),
      made("embedding", "padding_idx 2",
           [i23](V x) { return embedding(masked_fill(x[0], rows_mask({0, 0, 1, 0, 0}, x[0]), 0.7), i23(x[0]), 2); },
           {R({5, 3})}),
      made("embedding", "padding_idx -1 (row 4)",
           [i23](V x) { return embedding(masked_fill(x[0], rows_mask({0, 0, 0, 0, 1}, x[0]), -0.3), i23(x[0]), -1); },
           {R({5, 3})}),
      made("embedding", "padding_idx unused", [i23](V x) { return embedding(x[0], i23(x[0]), 3); }, {R({5, 3})}),
      made("embedding", "transposed weight", [i23](V x) { return embedding(x[0], i23(x[0])) * x[1]; },
           {T({5, 3}), R({2, 3, 3})}),
      made("embedding", "0-d index", [](V x) { return embedding(x[0], ids({2}, {}, x[0])); }, {R({4, 3})}),
      made("embedding", "of a stepped weight", [i3](V x) { return embedding(x[0], i3(x[0])); }, {S({4, 2})}),
  };
  // The padding row read, unmasked: no gradient there, as torch (the CUDA check only).
  OpTest pad = made("embedding", "padding_idx 2, the row read",
                    [](V x) { return embedding(x[0], ids({0, 2, 4, 2, 1, 2}, {2, 3}, x[0]), 2); }, {R({5, 3})});
  OpTest many = made("embedding", "many repeats, padding_idx -1",
                     [](V x) {
                       std::vector<int64_t> v(400);
                       for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7) % 5);
                       return embedding(x[0], ids(v, {20, 20}, x[0]), -1);
                     },
                     {T({5, 8})});
  for (OpTest* t : {&pad, &many}) {
    t->gradcheck = false;
    more.push_back(std::move(*t));
  }
  for (OpTest& t : more) {
    t.zero_size = false;  // a weight without rows has none for the indices
    rows.push_back(std::move(t));
  }
  const Tensor w = randn({5, 4}), wg = randn({5, 4}).requires_grad_(), u;
  rows[0].errors = {
      {"float indices", [] { embedding(ones({5, 4}), zeros({3})); }, {"[embedding]", "int64", "float32"}},
      {"bfloat16 indices", [] { embedding(ones({4, 2}, kBFloat16), tensor({0, 1}).to(kBFloat16)); },
       {"[embedding]", "int64", "bfloat16"}},
      {"an int64 weight", [] { embedding(ones({5, 4}, kInt64), zeros({3}, kInt64)); }, {"[embedding]", "weight", "int64"}},
      {"a 1-D weight", [] { embedding(ones({5}), zeros({3}, kInt64)); }, {"[embedding]", "2-D", "(5,)"}},
      {"index 5 of 5 rows", [w] { embedding(w, from_vector<int64_t>({0, 5}, {2})); }, {"[embedding]", "index 5", "5 rows"}},
      {"index -1", [w] { embedding(w, from_vector<int64_t>({0, 1, -1}, {3})); }, {"[embedding]", "index -1", "5 rows"}},
      {"a huge index", [w] { embedding(w, from_vector<int64_t>({100000000000LL}, {1})); },
       {"[embedding]", "100000000000"}},
      {"padding_idx 5 of 5 rows", [w] { embedding(w, zeros({2}, kInt64), 5); }, {"[embedding]", "padding_idx 5", "5"}},
      // With a graph: the check comes before anything is recorded.
      {"index 7, with a graph", [wg] { embedding(wg, from_vector<int64_t>({7}, {1})); }, {"[embedding]", "index 7"}},
      {"undefined indices", [u] { embedding(ones({3, 2}), u); }, {"[embedding]", "undefined"}},
  };
  return rows;
}

std::vector<OpTest> add_layer_norm_rows() {
  std::vector<OpTest> rows = {
      made("add_layer_norm", "no affine", [](V x) { return add_layer_norm(x[0], x[1], {4}); }, {R({3, 4}), R({3, 4})}),
      made("add_layer_norm", "weight and bias", [](V x) { return add_layer_norm(x[0], x[1], {4}, x[2], x[3]); },
           {R({2, 3, 4}), R({2, 3, 4}), R({4}), R({4})}),
      made("add_layer_norm", "(2, 3, 16) weight and bias", [](V x) { return add_layer_norm(x[0], x[1], {16}, x[2], x[3]); },
           {R({2, 3, 16}), R({2, 3, 16}), R({16}), R({16})}),
      made("add_layer_norm", "two dims, weight only", [](V x) { return add_layer_norm(x[0], x[1], {2, 3}, x[2]); },
           {R({2, 2, 3}), R({2, 2, 3}), R({2, 3})}),
      made("add_layer_norm", "transposed x, stepped residual, big eps",
           [](V x) { return add_layer_norm(x[0], x[1], {4}, x[2], x[3], 0.5); }, {T({3, 4}), S({3, 4}), R({4}), R({4})}),
      made("add_layer_norm", "the same tensor twice", [](V x) { return add_layer_norm(x[0], x[0], {5}, x[1]); },
           {R({2, 5}), R({5})}),
      made("add_layer_norm_with_sum", "sum and norm",
           [](V x) {
             SumAndNorm o = add_layer_norm_with_sum(x[0], x[1], {4}, x[2], x[3]);
             return cat({o.sum.reshape({-1}), mul(o.norm, o.sum).reshape({-1})}, 0);
           },
           {R({3, 4}), Pm({3, 4}), R({4}), R({4})}),
      made("add_layer_norm_with_sum", "two dims, bias only",
           [](V x) {
             SumAndNorm r = add_layer_norm_with_sum(x[0], x[1], {3, 4}, Tensor(), x[2]);
             return cat({r.sum.reshape({-1}) * 0.5, r.norm.reshape({-1})}, 0);
           },
           {R({2, 3, 4}), R({2, 3, 4}), R({3, 4})}),
  };
  // 700 wide is for the CUDA kernels' tiling: the CUDA check only (gradcheck's dense
  // Jacobian would take seconds for what the small rows check already).
  OpTest wide = made("add_layer_norm", "700 wide, strided residual",
                     [](V x) { return add_layer_norm(x[0], x[1], {700}, x[2]); }, {R({5, 700}), S({5, 700}), R({700})});
  wide.gradcheck = false;
  rows.push_back(std::move(wide));
  return rows;
}

// quantized_embedding's rows are the dequantised matrix's (dequantize itself is checked
// against gguf's reference in test_quantized.cpp): exactly, for every block type.
std::vector<OpTest> quantized_embedding_rows() {
  Generator gen(7);
  const Tensor w = randn({6, 64}, {}, &gen);
  const Tensor idx = from_vector<int64_t>({5, 0, 1, 2, 2, 3}, {2, 3});
  std::vector<OpTest> rows;
  for (const GGMLType type : {GGMLType::Q8_0, GGMLType::Q4_0, GGMLType::Q4_1, GGMLType::F16}) {
    const QuantizedMatrix q = quantize_matrix(w, type);
    rows.push_back({.op = "quantized_embedding",
                    .sample = std::string("(2, 3) indices of ") + ggml_type_info(type).name + " (6, 64)",
                    .fn = [q, idx](V) { return quantized_embedding(q, idx); },
                    .tags = {"f32"},
                    .gradcheck = false,
                    .zero_size = false,
                    .cuda = false,
                    .want = embedding(dequantize(q), idx)});
  }
  const QuantizedMatrix q = quantize_matrix(w, GGMLType::Q8_0);
  rows[0].errors = {
      {"float indices", [q] { quantized_embedding(q, zeros({3})); }, {"[quantized_embedding]", "int64", "float32"}},
      {"index 6 of 6 rows", [q] { quantized_embedding(q, from_vector<int64_t>({0, 6}, {2})); },
       {"[quantized_embedding]", "index 6", "6 rows"}},
      {"index -1", [q] { quantized_embedding(q, from_vector<int64_t>({-1}, {1})); },
       {"[quantized_embedding]", "index -1"}},
      {"no data", [] { quantized_embedding(QuantizedMatrix{GGMLType::Q8_0, 2, 32, nullptr, nullptr}, zeros({1}, kInt64)); },
       {"[quantized_embedding]", "no data"}},
  };
  return rows;
}

}  // namespace

std::vector<OpTest> embedding_and_fused_rows() {
  return rows_of({&embedding_rows, &add_layer_norm_rows, &quantized_embedding_rows});
}

}  // namespace kiln::optable
