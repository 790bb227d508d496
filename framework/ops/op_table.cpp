#include "ops/op_table.h"

namespace kiln {
namespace {

// "(double alpha KILN_DEFAULT(1.0))" -> "(double alpha = 1.0)": the parameters as a
// reader writes them. The macro's argument ends at its balancing parenthesis.
std::string readable_signature(const std::string& stringized) {
  const std::string marker = "KILN_DEFAULT(";
  std::string out;
  size_t i = 0;
  while (i < stringized.size()) {
    if (stringized.compare(i, marker.size(), marker) != 0) {
      out += stringized[i++];
      continue;
    }
    i += marker.size();
    int depth = 1;
    std::string value;
    while (i < stringized.size()) {
      const char c = stringized[i++];
      if (c == '(') ++depth;
      if (c == ')' && --depth == 0) break;
      value += c;
    }
    out += "= " + value;
  }
  return out;
}

}  // namespace

const std::vector<OpRecord>& op_records() {
  static const std::vector<OpRecord> records = [] {
    std::vector<OpRecord> r;
#define KILN_FUNCTION(ret, name, params, doc) \
  r.push_back({#name, readable_signature(#params), doc, OpRecord::Kind::Function});
#define KILN_FUNCTION_AND_METHOD(ret, name, params, args, doc) \
  r.push_back({#name, readable_signature(#params), doc, OpRecord::Kind::FunctionAndMethod});
#define KILN_METHOD(ret, name, params, cv, doc) \
  r.push_back({#name, readable_signature(#params), doc, OpRecord::Kind::Method});
#include "core/op_records.inc"
#undef KILN_METHOD
#undef KILN_FUNCTION_AND_METHOD
#undef KILN_FUNCTION
    return r;
  }();
  return records;
}

}  // namespace kiln
