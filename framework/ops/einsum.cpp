// einsum and outer. einsum parses the equation into one label per operand dim, takes
// the diagonals that repeated labels ask for, then contracts the operands pairwise, left
// to right: each pair is permuted to (batch, free, contracted) and (batch, contracted,
// free), reshaped to 3-D and multiplied with bmm (a pair with nothing to contract is a
// broadcast mul). Labels that no later operand and not the output need are summed out
// as early as they can be. Every step is a differentiable op. Under autocast the
// products are bmm's, in bfloat16 with float32 output (autograd/autocast.h).
#include <algorithm>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "autograd/autocast_cast.h"
#include "ops/op_helpers.h"

namespace kiln {
namespace {

constexpr const char* kEinsum = "einsum";

// A label: a letter's ASCII code, or kEllipsis + k for the k-th of the broadcast "..."
// dims (k counted from the left over the widest "..." of the operands).
using Label = int;
constexpr Label kEllipsis = 256;
// In a parsed term, where its "..." stands (before it is expanded to its dims).
constexpr Label kEllipsisMark = -1;

std::string label_name(Label l) {
  if (l >= kEllipsis) return "'...' dim " + std::to_string(l - kEllipsis);
  return std::string(1, static_cast<char>(l));
}

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// The term eq[begin, end): letters, and at most one "..." (kEllipsisMark); spaces are
// skipped. `what` names the term in messages ("operand 1", "the output").
std::vector<Label> parse_term(const std::string& eq, size_t begin, size_t end, const std::string& what) {
  std::vector<Label> term;
  bool seen_ellipsis = false;
  for (size_t i = begin; i < end; ++i) {
    const char c = eq[i];
    if (c == ' ') continue;
    if (c == '.') {
      KILN_CHECK(!seen_ellipsis, kEinsum, "found '.' for ", what, " after its ellipsis in \"", eq, "\"");
      KILN_CHECK(i + 2 < end && eq[i + 1] == '.' && eq[i + 2] == '.', kEinsum, "found '.' at index ", i,
                 " for ", what, " that is not part of an ellipsis '...' in \"", eq, "\"");
      seen_ellipsis = true;
      term.push_back(kEllipsisMark);
      i += 2;
      continue;
    }
    KILN_CHECK(is_letter(c), kEinsum, "invalid subscript '", std::string(1, c), "' at index ", i, " in \"", eq,
               "\": subscripts must be in [a-zA-Z]");
    term.push_back(c);
  }
  return term;
}

struct Parsed {
  std::vector<std::vector<Label>> inputs;  // with kEllipsisMark where "..." stands
  bool explicit_output = false;
  std::vector<Label> output;
};

Parsed parse(const std::string& eq, size_t num_operands) {
  Parsed p;
  const size_t arrow = eq.find("->");
  const size_t lhs_end = arrow == std::string::npos ? eq.size() : arrow;
  size_t begin = 0;
  while (true) {
    const size_t comma = eq.find(',', begin);
    const size_t end = comma == std::string::npos || comma > lhs_end ? lhs_end : comma;
    p.inputs.push_back(parse_term(eq, begin, end, "operand " + std::to_string(p.inputs.size())));
    if (end == lhs_end) break;
    begin = end + 1;
  }
  KILN_CHECK(p.inputs.size() == num_operands, kEinsum, "the equation \"", eq, "\" has ", p.inputs.size(),
             " operand term", p.inputs.size() == 1 ? "" : "s", ", but ", num_operands, " operand",
             num_operands == 1 ? " was" : "s were", " given");
  if (arrow != std::string::npos) {
    p.explicit_output = true;
    p.output = parse_term(eq, arrow + 2, eq.size(), "the output");  // a second "->" or ',' is an invalid subscript
  }
  return p;
}

struct Term {
  Tensor t;
  std::vector<Label> labels;  // one per dim of t
};

// The operand's labels with its "..." replaced by its dims' labels, aligned right over
// the widest "..." (`width` dims).
std::vector<Label> expand_ellipsis(const std::vector<Label>& term, int64_t rank, int64_t width) {
  std::vector<Label> out;
  for (Label l : term) {
    if (l != kEllipsisMark) {
      out.push_back(l);
      continue;
    }
    for (int64_t k = width - rank; k < width; ++k) out.push_back(kEllipsis + static_cast<Label>(k));
  }
  return out;
}

// The rank of operand i's "..." (0 without one); checks the subscript count against ndim.
int64_t ellipsis_rank(const std::vector<Label>& term, const Tensor& t, size_t i) {
  const bool has = std::find(term.begin(), term.end(), kEllipsisMark) != term.end();
  const int64_t letters = static_cast<int64_t>(term.size()) - (has ? 1 : 0);
  if (!has) {
    KILN_CHECK(letters == t.dim(), kEinsum, "the number of subscripts in the equation (", letters,
               ") does not match the number of dimensions (", t.dim(), ") for operand ", i,
               " of shape ", shape_str(t.shape()), " and no ellipsis was given");
    return 0;
  }
  KILN_CHECK(letters <= t.dim(), kEinsum, "the number of subscripts in the equation (", letters,
             ") is more than the number of dimensions (", t.dim(), ") for operand ", i, " of shape ",
             shape_str(t.shape()));
  return t.dim() - letters;
}

// Sizes of every label; a label's sizes must agree or be 1 (broadcast), and a label
// repeated within one operand (a diagonal) must have equal sizes there.
std::map<Label, int64_t> label_sizes(const std::vector<Term>& terms) {
  std::map<Label, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i) {
    std::map<Label, int64_t> own;
    for (size_t d = 0; d < terms[i].labels.size(); ++d) {
      const Label l = terms[i].labels[d];
      const int64_t s = terms[i].t.size(static_cast<int64_t>(d));
      auto [it, fresh] = own.emplace(l, s);
      KILN_CHECK(fresh || it->second == s, kEinsum, "subscript ", label_name(l), " is repeated for operand ", i,
                 " but the sizes don't match, ", it->second, " != ", s, " (shape ",
                 shape_str(terms[i].t.shape()), ")");
    }
    for (auto [l, s] : own) {
      auto [it, fresh] = size.emplace(l, s);
      if (fresh || it->second == s || s == 1) continue;
      KILN_CHECK(it->second == 1, kEinsum, "subscript ", label_name(l), " has size ", s, " for operand ", i,
                 " (shape ", shape_str(terms[i].t.shape()), ") which does not broadcast with previously seen size ",
                 it->second);
      it->second = s;
    }
  }
  return size;
}

// The output's labels: given after "->" (checked), or implicit: the "..." dims, then the
// letters seen exactly once, in ASCII order (upper case first), as torch.
std::vector<Label> output_labels(const Parsed& p, const std::vector<Term>& terms, int64_t width) {
  std::map<Label, int> count;
  for (const Term& t : terms)
    for (Label l : t.labels) ++count[l];
  if (p.explicit_output) {
    for (Label l : p.output) {
      if (l == kEllipsisMark) continue;
      KILN_CHECK(count.count(l), kEinsum, "output subscript ", label_name(l),
                 " does not appear in the equation for any input operand");
      KILN_CHECK(std::count(p.output.begin(), p.output.end(), l) == 1, kEinsum, "output subscript ",
                 label_name(l), " appears more than once in the output");
    }
    return expand_ellipsis(p.output, width, width);
  }
  std::vector<Label> out;
  for (int64_t k = 0; k < width; ++k) out.push_back(kEllipsis + static_cast<Label>(k));
  for (auto [l, n] : count)
    if (l < kEllipsis && n == 1) out.push_back(l);
  return out;
}

bool contains(const std::vector<Label>& v, Label l) { return std::find(v.begin(), v.end(), l) != v.end(); }

// The diagonal of t over dims p < q (equal sizes n): t (…, n@p, …, n@q, …) -> (…, n), the
// dims other than p and q in order, then the diagonal last. A strided slice of the two
// dims flattened: element (i, i) is i·(n + 1) in the flattened n·n.
Term take_diagonal(const Term& term, size_t p, size_t q) {
  const int64_t nd = term.t.dim();
  std::vector<int64_t> perm;
  Term out;
  for (int64_t d = 0; d < nd; ++d) {
    if (d == static_cast<int64_t>(p) || d == static_cast<int64_t>(q)) continue;
    perm.push_back(d);
    out.labels.push_back(term.labels[d]);
  }
  perm.insert(perm.end(), {static_cast<int64_t>(p), static_cast<int64_t>(q)});
  out.labels.push_back(term.labels[p]);
  const int64_t n = term.t.size(static_cast<int64_t>(p));
  Shape flat(term.t.shape().size() - 1);
  for (size_t i = 0; i + 2 < perm.size(); ++i) flat[i] = term.t.size(perm[i]);
  flat.back() = n * n;
  out.t = term.t.permute(perm).reshape(flat).slice(-1, 0, n * n, n + 1);
  return out;
}

// Replaces every label repeated within the term by its diagonal ("ii" -> "i").
Term diagonals(Term term) {
  for (bool again = true; again;) {
    again = false;
    for (size_t p = 0; p < term.labels.size() && !again; ++p)
      for (size_t q = p + 1; q < term.labels.size() && !again; ++q)
        if (term.labels[p] == term.labels[q]) {
          term = take_diagonal(term, p, q);
          again = true;
        }
  }
  return term;
}

// Sums out the term's labels that `keep` does not hold.
Term sum_out_unkept(Term term, const std::vector<Label>& keep) {
  std::vector<int64_t> dims;
  std::vector<Label> left;
  for (size_t d = 0; d < term.labels.size(); ++d) {
    if (contains(keep, term.labels[d])) left.push_back(term.labels[d]);
    else dims.push_back(static_cast<int64_t>(d));
  }
  if (dims.empty()) return term;
  return {sum(term.t, dims), left};
}

// The positions of `order`'s labels in the term (each label once in both).
std::vector<int64_t> positions(const Term& term, const std::vector<Label>& order) {
  std::vector<int64_t> perm;
  for (Label l : order) perm.push_back(std::find(term.labels.begin(), term.labels.end(), l) - term.labels.begin());
  return perm;
}

std::vector<Label> concat(std::initializer_list<const std::vector<Label>*> groups) {
  std::vector<Label> out;
  for (const auto* g : groups) out.insert(out.end(), g->begin(), g->end());
  return out;
}

// The term as a stack of matrices (Π batch, Π rows, Π cols): permuted to (batch, rows,
// cols), each dim expanded to its label's full size (broadcasting size-1 dims), and
// reshaped. When the term's dims already run (batch, cols, rows), the stack is taken
// the other way round and transposed: a view that matmul hands to BLAS as a flag,
// where the direct permutation would be copied ("bhqd,bhkd->bhqk").
Tensor as_matrices(const Term& term, const std::vector<Label>& batch, const std::vector<Label>& rows,
                   const std::vector<Label>& cols, const std::map<Label, int64_t>& size) {
  const bool transposed = term.labels == concat({&batch, &cols, &rows}) && term.labels != concat({&batch, &rows, &cols});
  const std::vector<Label>& first = transposed ? cols : rows;
  const std::vector<Label>& second = transposed ? rows : cols;
  Shape full, three;
  for (const auto* g : {&batch, &first, &second}) {
    int64_t n = 1;
    for (Label l : *g) {
      full.push_back(size.at(l));
      n = checked_mul(kEinsum, n, size.at(l));
    }
    three.push_back(n);
  }
  checked_numel(kEinsum, full);  // each label's size fits, their product may not
  Tensor m = term.t.permute(positions(term, concat({&batch, &first, &second}))).expand(full).reshape(three);
  return transposed ? m.transpose(1, 2) : m;
}

// a (labels A) with b (labels B) -> (batch…, a_free…, b_free…): the labels in both that
// `keep` holds are batch dims, those it does not hold are contracted; the rest are free.
Term contract(const Term& a, const Term& b, const std::vector<Label>& keep, const std::map<Label, int64_t>& size) {
  std::vector<Label> batch, summed, a_free, b_free;
  for (Label l : a.labels) {
    if (!contains(b.labels, l)) a_free.push_back(l);
    else if (contains(keep, l)) batch.push_back(l);
    else summed.push_back(l);
  }
  for (Label l : b.labels)
    if (!contains(a.labels, l)) b_free.push_back(l);
  Term out;
  out.labels = concat({&batch, &a_free, &b_free});
  // The intermediate may be larger than every operand and than the output ("i,j->").
  Shape shape;
  for (Label l : out.labels) shape.push_back(size.at(l));
  checked_numel(kEinsum, shape);
  if (summed.empty()) {
    // Nothing to contract: an outer product per batch element, which a broadcast mul
    // computes directly. a -> (batch…, a_free…, 1…), b -> (batch…, 1…, b_free…).
    Tensor ta = a.t.permute(positions(a, concat({&batch, &a_free})));
    for (size_t i = 0; i < b_free.size(); ++i) ta = ta.unsqueeze(-1);
    Tensor tb = b.t.permute(positions(b, concat({&batch, &b_free})));
    for (size_t i = 0; i < a_free.size(); ++i) tb = tb.unsqueeze(static_cast<int64_t>(batch.size()));
    out.t = mul(ta, tb);
    return out;
  }
  Tensor a3 = as_matrices(a, batch, a_free, summed, size);  // (B, M, K)
  Tensor b3 = as_matrices(b, batch, summed, b_free, size);  // (B, K, N)
  out.t = bmm(a3, b3).reshape(shape);
  return out;
}

// Whether autocast rules every operand (float32 and bfloat16 then mix, as in torch).
bool autocast_all(const std::vector<Tensor>& operands) {
  for (const Tensor& t : operands)
    if (!detail::autocast_applies({&t})) return false;
  return true;
}

void check_operands(const std::vector<Tensor>& operands) {
  KILN_CHECK(!operands.empty(), kEinsum, "expected at least one operand");
  const bool autocast = autocast_all(operands);
  for (size_t i = 0; i < operands.size(); ++i) {
    const Tensor& t = operands[i];
    KILN_CHECK(t.defined(), kEinsum, "operand ", i, " is an undefined tensor");
    KILN_CHECK(is_floating(t.dtype()), kEinsum,
               "expected floating-point operands (float32, float64 or bfloat16), got ", dtype_name(t.dtype()),
               " for operand ", i);
    KILN_CHECK(t.dtype() == operands[0].dtype() || autocast, kEinsum, "expected operands of one dtype, got ",
               dtype_name(operands[0].dtype()), " for operand 0 and ", dtype_name(t.dtype()), " for operand ", i);
  }
}

}  // namespace

// operands labelled by the equation -> the output's labels (see ops.h)
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands_in) {
  check_operands(operands_in);
  // Under autocast, mixed float32 and bfloat16 operands meet in float32 (exact): the
  // products round them to bfloat16 anyway, and a product-free step (a broadcast mul)
  // then sees one dtype.
  std::vector<Tensor> operands = operands_in;
  if (autocast_all(operands)) {
    bool mixed = false;
    for (const Tensor& t : operands) mixed = mixed || t.dtype() != operands[0].dtype();
    if (mixed)
      for (Tensor& t : operands) t = t.to(kFloat32);
  }
  const Parsed p = parse(equation, operands.size());
  std::vector<int64_t> ranks;
  for (size_t i = 0; i < operands.size(); ++i) ranks.push_back(ellipsis_rank(p.inputs[i], operands[i], i));
  const int64_t width = *std::max_element(ranks.begin(), ranks.end());
  std::vector<Term> terms;
  for (size_t i = 0; i < operands.size(); ++i)
    terms.push_back({operands[i], expand_ellipsis(p.inputs[i], ranks[i], width)});
  const std::map<Label, int64_t> size = label_sizes(terms);
  const std::vector<Label> output = output_labels(p, terms, width);
  Shape shape;
  for (Label l : output) shape.push_back(size.at(l));
  checked_numel(kEinsum, shape);
  for (Term& t : terms) t = diagonals(std::move(t));

  // What is still needed after operand i: the output's labels and those of operands > i.
  auto needed_after = [&](size_t i) {
    std::vector<Label> keep = output;
    for (size_t j = i + 1; j < terms.size(); ++j) keep.insert(keep.end(), terms[j].labels.begin(), terms[j].labels.end());
    return keep;
  };
  Term acc = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) {
    const std::vector<Label> keep = needed_after(i);
    std::vector<Label> keep_a = keep, keep_b = keep;
    keep_a.insert(keep_a.end(), terms[i].labels.begin(), terms[i].labels.end());
    keep_b.insert(keep_b.end(), acc.labels.begin(), acc.labels.end());
    acc = contract(sum_out_unkept(acc, keep_a), sum_out_unkept(terms[i], keep_b), keep, size);
  }
  acc = sum_out_unkept(acc, output);
  // Output labels missing from acc cannot occur (each is some operand's), so this is a
  // permutation; output dims of a broadcast size-1 label are expanded to their size.
  return acc.t.permute(positions(acc, output)).expand(shape);
}

// a (M), b (N) -> (M, N)
Tensor outer(const Tensor& a, const Tensor& b) {
  detail::check_defined("outer", a, "first operand");
  detail::check_defined("outer", b, "second operand");
  KILN_CHECK(a.dim() == 1, "outer", "expected a 1-D first argument, got shape ", shape_str(a.shape()));
  KILN_CHECK(b.dim() == 1, "outer", "expected a 1-D second argument, got shape ", shape_str(b.shape()));
  checked_numel("outer", {a.size(0), b.size(0)});  // else mul would name itself
  return mul(a.unsqueeze(1), b.unsqueeze(0));
}

}  // namespace kiln
