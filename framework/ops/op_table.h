#pragma once
// The op records (core/op_records.inc) as data, for the tests that walk every op and for
// tools that list them.
#include <string>
#include <vector>

namespace kiln {

struct OpRecord {
  enum class Kind { Function, FunctionAndMethod, Method };
  std::string name;       // "add", "operator+", "add_"
  std::string signature;  // "(const Tensor& a, const Tensor& b, double alpha = 1.0)"
  std::string doc;        // what it does, one line
  Kind kind;
};

// Every record, in the file's order (an overload is a record of its own).
const std::vector<OpRecord>& op_records();

}  // namespace kiln
