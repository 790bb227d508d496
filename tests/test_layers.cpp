// The layers of docs/design.md, enforced: every #include of framework/ and models/ goes to
// the same layer or one below it. The order is read from design.md's "layers:" line, so
// the page and the test cannot drift apart.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace fs = std::filesystem;

namespace {

// "layers: core < backend < autograd+ops < ..." -> {"core": 0, "backend": 1, "autograd": 2, ...}
std::map<std::string, int> read_layer_order(const fs::path& design_md) {
  std::ifstream in(design_md);
  REQUIRE_MESSAGE(in.good(), "cannot read ", design_md.string());
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("layers: ", 0) != 0) continue;
    std::map<std::string, int> rank;
    std::istringstream words(line.substr(8));
    std::string word;
    int level = 0;
    while (words >> word) {
      if (word == "<") {
        ++level;
        continue;
      }
      std::istringstream names(word);
      std::string name;
      while (std::getline(names, name, '+')) rank[name] = level;
    }
    return rank;
  }
  FAIL("no \"layers: ...\" line in ", design_md.string());
  return {};
}

// The directory under framework/ (or "models") that a path relative to the root names.
std::string layer_of(const std::string& relative) {
  if (relative.rfind("models/", 0) == 0) return "models";
  if (relative.rfind("framework/", 0) != 0) return "";
  const std::string rest = relative.substr(10);
  const size_t slash = rest.find('/');
  return slash == std::string::npos ? "" : rest.substr(0, slash);
}

struct Edge {
  std::string file;
  int line;
  std::string include;
  std::string from, to;
};

// Every include of a Kiln header in the files under root/framework and root/models, with
// the layer it starts in and the one it reaches. Quoted includes resolve relative to the
// file, then to framework/; <kiln/...> through include/kiln's links.
std::vector<Edge> include_edges(const fs::path& root) {
  static const std::regex include_re(R"(^\s*#\s*include\s*(["<])([^">]+)[">])");
  std::vector<Edge> edges;
  for (const char* top : {"framework", "models"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh" && ext != ".inc"))
        continue;
      const std::string file = fs::relative(entry.path(), root).generic_string();
      const std::string from = layer_of(file);
      // framework/pch lists the headers Meson precompiles for every source: a build
      // device, not a layer.
      if (from.empty() || from == "pch") continue;
      std::ifstream in(entry.path());
      std::string text;
      int number = 0;
      while (std::getline(in, text)) {
        ++number;
        std::smatch m;
        if (!std::regex_search(text, m, include_re)) continue;
        const std::string name = m[2];
        std::string target;
        if (m[1] == "<") {
          if (name.rfind("kiln/", 0) != 0) continue;
          // include/kiln/ is the install's layout as links into framework/ and models/.
          const fs::path linked = root / "include" / name;
          target = fs::exists(linked) ? fs::relative(fs::canonical(linked), fs::canonical(root)).generic_string()
                                      : "framework/" + name.substr(5);
        } else {
          const fs::path beside = (entry.path().parent_path() / name).lexically_normal();
          const fs::path framework_root = (root / "framework" / name).lexically_normal();
          if (fs::exists(beside)) target = fs::relative(beside, root).generic_string();
          else if (fs::exists(framework_root)) target = fs::relative(framework_root, root).generic_string();
          else continue;  // generated (version.h) or outside Kiln
        }
        const std::string to = layer_of(target);
        if (!to.empty()) edges.push_back({file, number, name, from, to});
      }
    }
  }
  return edges;
}

// The edges that reach up, or into a directory the order does not list.
std::vector<std::string> violations(const std::vector<Edge>& edges, const std::map<std::string, int>& rank) {
  std::vector<std::string> out;
  for (const Edge& e : edges) {
    const auto from = rank.find(e.from), to = rank.find(e.to);
    if (from == rank.end() || to == rank.end()) {
      out.push_back(e.file + ":" + std::to_string(e.line) + " " + e.include + ": layer '" +
                    (from == rank.end() ? e.from : e.to) + "' is not in design.md's order");
    } else if (to->second > from->second) {
      out.push_back(e.file + ":" + std::to_string(e.line) + " includes " + e.include + ": " + e.from +
                    " may not reach up to " + e.to);
    }
  }
  return out;
}

fs::path source_root() {
  const char* env = std::getenv("KILN_SOURCE_ROOT");
  REQUIRE_MESSAGE(env != nullptr, "KILN_SOURCE_ROOT is not set (meson test sets it)");
  return env;
}

}  // namespace

TEST_CASE("every include of framework/ and models/ keeps to docs/design.md's layers") {
  const fs::path root = source_root();
  const auto rank = read_layer_order(root / "docs" / "design.md");
  CHECK(rank.at("core") < rank.at("backend"));
  CHECK(rank.at("backend") < rank.at("ops"));
  CHECK(rank.at("ops") < rank.at("train"));
  CHECK(rank.at("train") < rank.at("models"));

  const std::vector<Edge> edges = include_edges(root);
  CHECK(edges.size() > 500);  // the scan saw the tree (quoted and <kiln/...> includes)
  const std::vector<std::string> bad = violations(edges, rank);
  std::string report;
  for (const std::string& v : bad) report += v + "\n";
  CHECK_MESSAGE(bad.empty(), bad.size(), " include(s) against the layers:\n", report);
}

TEST_CASE("the layer check flags an include that reaches up") {
  kiln::testing::ScratchDir dir("layers");
  fs::create_directories(dir.path / "framework" / "core");
  fs::create_directories(dir.path / "framework" / "ops");
  fs::create_directories(dir.path / "models" / "m");
  std::ofstream(dir.path / "framework" / "ops" / "ops.h") << "#pragma once\n#include \"../core/tensor.h\"\n";
  std::ofstream(dir.path / "framework" / "core" / "tensor.h") << "#pragma once\n";
  std::ofstream(dir.path / "framework" / "core" / "tensor.cpp") << "#include \"core/tensor.h\"\n#include \"ops/ops.h\"\n";
  std::ofstream(dir.path / "models" / "m" / "m.cpp") << "#include <kiln/ops/ops.h>\n#include <vector>\n";
  const std::map<std::string, int> rank = {{"core", 0}, {"ops", 1}, {"models", 2}};

  const std::vector<Edge> edges = include_edges(dir.path);
  CHECK(edges.size() == 4);
  const std::vector<std::string> bad = violations(edges, rank);
  REQUIRE(bad.size() == 1);
  CHECK(bad[0] == "framework/core/tensor.cpp:2 includes ops/ops.h: core may not reach up to ops");

  // Without models in the order, its include is flagged as well as core's.
  const std::vector<std::string> unknown = violations(edges, {{"core", 0}, {"ops", 1}});
  REQUIRE(unknown.size() == 2);
  const std::string models_include = "models/m/m.cpp:1 kiln/ops/ops.h: layer 'models' is not in design.md's order";
  CHECK((unknown[0] == models_include || unknown[1] == models_include));
}

TEST_CASE("the op records read as a table") {
  const auto& records = kiln::op_records();
  CHECK(records.size() > 200);
  size_t methods = 0;
  for (const kiln::OpRecord& r : records) {
    INFO(r.name, r.signature);
    CHECK(!r.doc.empty());
    REQUIRE(r.signature.size() >= 2);
    CHECK(r.signature.front() == '(');
    CHECK(r.signature.back() == ')');
    CHECK(r.signature.find("KILN_DEFAULT") == std::string::npos);
    if (r.kind == kiln::OpRecord::Kind::FunctionAndMethod) {
      // the method's self is the function's first parameter
      CHECK(r.signature.rfind("(const Tensor& ", 0) == 0);
      ++methods;
    }
  }
  CHECK(methods > 90);
  const auto add = std::find_if(records.begin(), records.end(), [](const kiln::OpRecord& r) { return r.name == "add"; });
  REQUIRE(add != records.end());
  CHECK(add->signature == "(const Tensor& a, const Tensor& b, double alpha = 1.0)");
}
