// Safetensors state dicts and training checkpoints (framework/io): round trips of every
// dtype, files written by PyTorch (tests/fixtures/make_io_fixtures.py), checkpoints that
// resume training bit for bit, atomic writes, and a named error for every kind of broken
// file, never a crash or a half-loaded module. Then the trainer's checkpoints: metadata
// values checked on load, memory that does not grow with the steps run, and the
// temporary files of interrupted saves removed by the next save once their process is
// gone.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "io/json.h"
#include "test_util.h"
#include "toy_task.h"

using namespace kiln;
using namespace kiln::io;
namespace tr = kiln::transformer;
using kiln::testing::error_of;
using kiln::testing::load_fixtures;
using kiln::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

// ------------------------------------------------------------------ files

// One folder for the whole run, removed at exit: temp/kiln_test_io_<pid>.
struct TempRoot {
  fs::path path;
  TempRoot() {
    path = fs::temp_directory_path() / ("kiln_test_io_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempRoot() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// A fresh, empty folder for one test.
fs::path fresh_dir(const std::string& name) {
  static TempRoot root;
  fs::path p = root.path / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in.good());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::vector<std::string> list_dir(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string u64le(uint64_t n) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &n, 8);
  return s;
}

// A safetensors file from a header text and raw data, as a hand-made (or broken) writer would.
std::string st_bytes(const std::string& header, const std::string& data = "") { return u64le(header.size()) + header + data; }

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// ------------------------------------------------------------------ tensors

// The row-major bytes of a tensor: compares values bit for bit (NaN payloads, -0.0).
std::string bytes_of(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && bytes_of(a) == bytes_of(b);
}

// name -> bytes of every parameter and buffer: to check that a failed load changed nothing.
std::map<std::string, std::string> snapshot(const nn::Module& m) {
  std::map<std::string, std::string> out;
  for (const auto& [k, t] : m.state_dict()) out[k] = dtype_name(t.dtype()) + shape_str(t.shape()) + bytes_of(t);
  return out;
}

std::map<std::string, std::string> snapshot(const optim::Optimizer& o) {
  std::map<std::string, std::string> out;
  for (const auto& [k, t] : o.state_dict()) out[k] = dtype_name(t.dtype()) + shape_str(t.shape()) + bytes_of(t);
  return out;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The Kiln twin of make_io_fixtures.py's Net: the same parameter names as torch's.
struct TorchNet : nn::Module {
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<nn::Sequential> seq;
  TorchNet() : Module("Net") {
    emb = register_module("emb", std::make_shared<nn::Embedding>(5, 3));
    seq = register_module("seq", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
                                     std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::LayerNorm>(4),
                                     std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(4, 2)}));
  }
  Tensor forward(const Tensor& idx) { return seq->forward(emb->forward(idx)); }
};

// A file in tests/fixtures ($KILN_FIXTURES).
std::string fixture(const std::string& name) {
  const char* dir = std::getenv("KILN_FIXTURES");
  return std::string(dir ? dir : "tests/fixtures") + "/" + name;
}

// The message of parse_safetensors on a hand-made file.
std::string parse_error(const std::string& bytes) {
  return error_of([&] { parse_safetensors(bytes, "bad.safetensors"); });
}

}  // namespace

// ====================================================================== JSON

TEST_CASE("json: parses every kind of value, in file order") {
  JsonValue v = parse_json(
      " {\"b\": [1, -2, 3.5, -0.25e2, 1E3, 0], \"a\": {\"t\": true, \"f\": false, \"n\": null},"
      " \"s\": \"q\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u20ac\\ud83d\\ude00\", \"e\": [], \"o\": {}}\n\t",
      "test");
  REQUIRE(v.kind == JsonValue::Kind::Object);
  REQUIRE(v.object.size() == 5);
  CHECK(v.object[0].first == "b");  // file order, not sorted
  CHECK(v.object[1].first == "a");
  const JsonValue* b = v.find("b");
  REQUIRE(b != nullptr);
  REQUIRE(b->array.size() == 6);
  CHECK(b->array[0].is_integer);
  CHECK(b->array[0].integer == 1);
  CHECK(b->array[1].integer == -2);
  CHECK_FALSE(b->array[2].is_integer);
  CHECK(b->array[2].number == 3.5);
  CHECK(b->array[3].number == -25.0);
  CHECK_FALSE(b->array[3].is_integer);
  CHECK(b->array[4].number == 1000.0);
  CHECK(b->array[5].is_integer);
  const JsonValue* a = v.find("a");
  CHECK(a->find("t")->boolean);
  CHECK(a->find("t")->kind == JsonValue::Kind::Bool);
  CHECK_FALSE(a->find("f")->boolean);
  CHECK(a->find("n")->kind == JsonValue::Kind::Null);
  CHECK(a->find("missing") == nullptr);
  // \u escapes become UTF-8; a surrogate pair is one 4-byte character (U+1F600).
  CHECK(v.find("s")->string == "q\"\\/\b\f\n\r\t\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  CHECK(v.find("e")->array.empty());
  CHECK(v.find("o")->object.empty());
  // Integers at the limits of int64.
  JsonValue big = parse_json("[9223372036854775807, -9223372036854775808]", "test");
  CHECK(big.array[0].integer == std::numeric_limits<int64_t>::max());
  CHECK(big.array[1].integer == std::numeric_limits<int64_t>::min());
}

TEST_CASE("json: strict parse errors name the op, the problem and the byte") {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"{} x", "trailing characters after the JSON value at byte 3"},
      {"{}{}", "trailing characters"},
      {"{\"a\": \"\\q\"}", "bad escape"},
      {"{\"a\": \"\\u12G4\"}", "bad \\u escape"},
      {"\"\\u12", "short \\u escape"},
      {"\"\\ud83d\"", "unpaired surrogate"},
      {"\"\\ud83d\\u0041\"", "unpaired surrogate"},
      {"\"\\ude00\"", "unpaired surrogate"},
      {"{\"a\": \"abc", "unterminated string"},
      {"\"a\nb\"", "control character in string"},
      {"{\"a\": 1, \"a\": 2}", "duplicate key \"a\""},
      {"{\"a\": 1,}", "expected a string key"},
      {"[1, 2,]", "unexpected character"},
      {"{\"a\" 1}", "expected ':'"},
      {"{\"a\": 1 \"b\": 2}", "expected ',' or '}'"},
      {"[1 2]", "expected ',' or ']'"},
      {"{1: 2}", "expected a string key"},
      {"tru", "unexpected character"},
      {"nul", "unexpected character"},
      {"", "unexpected end"},
      {"   ", "unexpected end"},
      {"[", "unexpected end"},
      {"{\"a\":", "unexpected end"},
      {"-", "bad number '-'"},
      {"01", "bad number '01'"},
      {"-012", "bad number '-012'"},
      {"1.", "bad number '1.'"},
      {"1.e5", "bad number"},
      {"1e", "bad number '1e'"},
      {"1e+", "bad number '1e+'"},
      {".5", "unexpected character"},
      {"+1", "unexpected character"},
      {"1-2", "trailing characters"},
      {"NaN", "unexpected character"},
      {"99999999999999999999", "integer out of range"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    std::string msg = error_of([&] { parse_json(c.text, "myop"); });
    CHECK(msg.rfind("[myop] corrupt header: ", 0) == 0);
    CHECK(contains(msg, c.message));
    CHECK(contains(msg, " of the JSON header"));
  }
  // The context names the file.
  CHECK(error_of([] { parse_json("{", "safetensors", "f.safetensors: "); })
            .rfind("[safetensors] f.safetensors: corrupt header: unexpected end at byte 1", 0) == 0);
}

TEST_CASE("json: nesting is limited, never a stack overflow") {
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  CHECK(parse_json(nested(64), "test").kind == JsonValue::Kind::Array);
  CHECK(contains(error_of([&] { parse_json(nested(66), "test"); }), "nesting too deep"));
  CHECK(contains(error_of([&] { parse_json(std::string(1000000, '['), "test"); }), "nesting too deep"));
  std::string objects;
  for (int i = 0; i < 100; ++i) objects += "{\"a\":";
  CHECK(contains(error_of([&] { parse_json(objects, "test"); }), "nesting too deep"));
}

TEST_CASE("json: json_quote round-trips every byte a key or value may hold") {
  std::string all;
  for (int c = 1; c < 256; ++c) all += static_cast<char>(c);  // control bytes, quotes, backslash, UTF-8 bytes
  for (const std::string& s : {std::string(""), std::string("plain"), std::string("q\"b\\s/\n\r\t\b\f"), all,
                               std::string("caf\xC3\xA9 \xF0\x9F\x98\x80")}) {
    std::string quoted = json_quote(s);
    CHECK(quoted.front() == '"');
    for (char c : quoted) CHECK(static_cast<unsigned char>(c) >= 0x20);  // no raw control characters
    JsonValue v = parse_json(quoted, "test");
    REQUIRE(v.kind == JsonValue::Kind::String);
    CHECK(v.string == s);
  }
}

// ====================================================================== round trips

TEST_CASE("safetensors: every dtype round-trips bit for bit") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  TensorMap in;
  in["f32"] = from_vector<float>({1.5f, -0.0f, static_cast<float>(inf), -static_cast<float>(inf),
                                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                                  static_cast<float>(nan), 1e-30f},
                                 {2, 4});
  in["f64"] = from_vector<double>({nan, -inf, -0.0, std::numeric_limits<double>::denorm_min(), 0.1, 1e308}, {3, 1, 2});
  in["i64"] = from_vector<int64_t>({std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), -1, 0,
                                    (int64_t{1} << 53) + 1},
                                   {5});
  in["bool"] = from_vector<bool>({true, false, false, true, true, false}, {2, 3});
  std::string path = (fresh_dir("dtypes") / "all.safetensors").string();
  save_safetensors(path, in);
  SafetensorsContents out = load_safetensors(path);
  REQUIRE(out.tensors.size() == in.size());
  for (const auto& kt : in) {
    const auto& k = kt.first;
    const auto& t = kt.second;
    CAPTURE(k);
    REQUIRE(out.tensors.count(k));
    const Tensor& r = out.tensors.at(k);
    CHECK(r.dtype() == t.dtype());
    CHECK(r.shape() == t.shape());
    CHECK(r.device() == kCPU);
    CHECK(r.is_contiguous());
    CHECK_FALSE(r.requires_grad());
    CHECK(same_bits(r, t));
  }
  CHECK(std::isnan(out.tensors["f64"].at({0, 0, 0})));
  CHECK(std::signbit(out.tensors["f64"].at({1, 0, 0})));
  CHECK(out.tensors["i64"].data<int64_t>()[4] == (int64_t{1} << 53) + 1);  // beyond double precision
  CHECK(out.metadata.empty());
  // A loaded tensor owns its memory: changing it leaves the saved tensor alone.
  out.tensors["f32"].fill_(0);
  CHECK(in["f32"].at({0, 0}) == 1.5);
}

TEST_CASE("safetensors: the bytes follow the format (header size, JSON, 8-byte alignment, packed data)") {
  TensorMap in{{"w", tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}})}, {"n", tensor({1, 2}, kInt64)}, {"m", from_vector<bool>({true}, {1})}};
  std::string bytes = serialize_safetensors(in, {{"who", "me"}});
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);  // the data starts 8-byte aligned
  CHECK(8 + n + 24 + 16 + 1 == bytes.size());
  std::string header = bytes.substr(8, n);
  CHECK(header.front() == '{');
  size_t last = header.find_last_not_of(' ');
  CHECK(header[last] == '}');  // padded with spaces, as the reference does
  JsonValue h = parse_json(header, "test");
  CHECK(h.find("__metadata__")->find("who")->string == "me");
  const JsonValue* w = h.find("w");
  REQUIRE(w != nullptr);
  CHECK(w->find("dtype")->string == "F32");
  REQUIRE(w->find("shape")->array.size() == 2);
  CHECK(w->find("shape")->array[0].integer == 2);
  CHECK(w->find("shape")->array[1].integer == 3);
  CHECK(h.find("n")->find("dtype")->string == "I64");
  CHECK(h.find("m")->find("dtype")->string == "BOOL");
  // The offsets tile the data exactly; each tensor's bytes sit where its offsets say.
  uint64_t total = 0;
  for (const auto& [name, e] : h.object) {
    if (name == "__metadata__") continue;
    int64_t b = e.find("data_offsets")->array[0].integer, en = e.find("data_offsets")->array[1].integer;
    total += static_cast<uint64_t>(en - b);
    CHECK(bytes.substr(8 + n + b, en - b) == bytes_of(in.at(name)));
  }
  CHECK(total == bytes.size() - 8 - n);
  // As the reference orders them: int64/float64 first, then float32, then bool, so each
  // tensor starts at a multiple of its element size.
  std::vector<std::string> order;
  for (const auto& [name, e] : h.object)
    if (name != "__metadata__") {
      order.push_back(name);
      CHECK(e.find("data_offsets")->array[0].integer % static_cast<int64_t>(in.at(name).element_size()) == 0);
    }
  CHECK(order == std::vector<std::string>{"n", "w", "m"});
  int64_t prev_end = 0;
  for (const auto& name : order) {  // the header lists them in data order
    CHECK(h.find(name)->find("data_offsets")->array[0].integer == prev_end);
    prev_end = h.find(name)->find("data_offsets")->array[1].integer;
  }
  // Without metadata there is no __metadata__ entry; no tensors at all is a valid file.
  std::string empty = serialize_safetensors({});
  std::memcpy(&n, empty.data(), 8);
  CHECK(empty.size() == 8 + n);
  CHECK(parse_json(empty.substr(8), "test").object.empty());
  SafetensorsContents c = parse_safetensors(empty);
  CHECK(c.tensors.empty());
  CHECK(c.metadata.empty());
}

TEST_CASE("safetensors: 0-d, empty and non-contiguous tensors") {
  Tensor base = arange(0, 24, 1, kFloat32).reshape({2, 3, 4});
  TensorMap in;
  in["scalar"] = scalar_tensor(-3.25);
  in["scalar_i64"] = scalar_tensor(42, kInt64);
  in["scalar_bool"] = full({}, 1, kBool);
  in["empty"] = zeros({0});
  in["empty_2d"] = zeros({2, 0, 3}, kInt64);
  in["transposed"] = base.transpose(0, 2);             // (4, 3, 2), strides reversed
  in["stepped"] = base.slice(2, 1, 4, 2);              // (2, 3, 2), every other column
  in["expanded"] = tensor({1.0, 2.0}).expand({3, 2});  // stride 0
  in["row"] = base.select(1, 2);                       // offset into the storage
  for (const char* k : {"transposed", "stepped", "expanded", "row"}) REQUIRE_FALSE(in[k].is_contiguous());
  SafetensorsContents out = parse_safetensors(serialize_safetensors(in));
  REQUIRE(out.tensors.size() == in.size());
  for (const auto& kt : in) {
    const auto& k = kt.first;
    const auto& t = kt.second;
    CAPTURE(k);
    const Tensor& r = out.tensors.at(k);
    CHECK(r.shape() == t.shape());
    CHECK(r.dtype() == t.dtype());
    CHECK(r.is_contiguous());
    CHECK(same_bits(r, t));  // the logical values, written contiguous
  }
  CHECK(out.tensors["scalar"].dim() == 0);
  CHECK(out.tensors["scalar"].item() == -3.25);
  CHECK(out.tensors["scalar_i64"].item() == 42);
  CHECK(out.tensors["scalar_bool"].item() == 1);
  CHECK(out.tensors["empty_2d"].numel() == 0);
  CHECK(out.tensors["transposed"].at({3, 2, 1}) == base.at({1, 2, 3}));
  CHECK(out.tensors["stepped"].at({1, 2, 1}) == base.at({1, 2, 3}));
  CHECK(out.tensors["expanded"].to_vector<float>() == std::vector<float>{1, 2, 1, 2, 1, 2});
  CHECK(out.tensors["row"].to_vector<float>() == std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23});
}

TEST_CASE("safetensors: tensors that need grad, and results of ops, save their values") {
  Tensor w = randn({3, 2}, TensorOptions().requires_grad());
  Tensor y = mul(w, 2.0);  // non-leaf with a graph
  SafetensorsContents out = parse_safetensors(serialize_safetensors({{"w", w}, {"y", y}}));
  CHECK(same_bits(out.tensors["w"], w));
  CHECK(same_bits(out.tensors["y"], y));
  CHECK_FALSE(out.tensors["w"].requires_grad());
  CHECK(w.requires_grad());  // the saved tensor is untouched
}

TEST_CASE("safetensors: metadata round-trips, with any characters") {
  Metadata meta{{"format", "pt"},
                {"quote\"and\\backslash", "line\nbreak\ttab\x01"},
                {"unicode", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"},
                {"empty", ""},
                {"", "empty key"}};
  std::string path = (fresh_dir("meta") / "m.safetensors").string();
  save_safetensors(path, {{"x", ones({2})}}, meta);
  SafetensorsContents out = load_safetensors(path);
  CHECK(out.metadata == meta);
  CHECK(out.tensors.size() == 1);
  // Metadata alone, no tensors.
  CHECK(parse_safetensors(serialize_safetensors({}, meta)).metadata == meta);
}

TEST_CASE("safetensors: tensor names with any characters round-trip") {
  TensorMap in{{"layers.0.attn.weight", ones({1})},
               {"with \"quotes\" and \\", zeros({1})},
               {"caf\xC3\xA9", full({1}, 2.0)},
               {"", full({1}, 3.0)}};
  SafetensorsContents out = parse_safetensors(serialize_safetensors(in));
  REQUIRE(out.tensors.size() == in.size());
  for (const auto& [k, t] : in) CHECK(same_bits(out.tensors.at(k), t));
}

// ====================================================================== PyTorch files

TEST_CASE("torch: a file written by PyTorch loads with the same values") {
  auto expected = load_fixtures("io_expected.txt");
  std::string path = fixture("torch_dtypes.safetensors");
  SafetensorsContents c = load_safetensors(path);
  CHECK(c.metadata == Metadata{{"source", "torch"}, {"quote\"key", "a\nb"}});
  size_t compared = 0;
  for (const auto& [name, want] : expected) {
    if (name.rfind("dtypes.", 0) != 0) continue;
    std::string key = name.substr(7);
    CAPTURE(key);
    REQUIRE(c.tensors.count(key));
    const Tensor& got = c.tensors.at(key);
    // F16 -> float32; I32/I16/I8/U8 -> int64; BF16 stays bfloat16 (the fixture has its
    // values widened to float32).
    CHECK(got.dtype() == (key == "bf16" ? kBFloat16 : want.dtype()));
    CHECK(got.shape() == want.shape());
    CHECK(equal(got, want));  // exact: every value is representable in both
    ++compared;
  }
  CHECK(compared == c.tensors.size());
  CHECK(compared == 14);
  // The values that go through conversions, spelled out.
  CHECK(c.tensors["f16"].at({2}) == std::ldexp(1.0, -24));  // the smallest subnormal half
  CHECK(c.tensors["f16"].at({4}) == 65504.0);
  CHECK(std::signbit(c.tensors["f16"].at({5})));
  CHECK(std::isinf(c.tensors["f16"].at({6})));
  CHECK(c.tensors["bf16"].at({1}) == -3.140625);
  CHECK(std::signbit(c.tensors["bf16"].at({4})));
  CHECK(c.tensors["i32"].at({0}) == -2147483648.0);
  CHECK(c.tensors["u8"].at({1}) == 255);  // unsigned, not -1
  CHECK(c.tensors["i8"].at({0}) == -128);
  CHECK(c.tensors["i64"].data<int64_t>()[5] == (int64_t{1} << 53) - 1);
  CHECK(c.tensors["scalar"].dim() == 0);
  CHECK(c.tensors["empty"].shape() == Shape{0, 3});
  CHECK(c.tensors["transposed"].to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  // Saved again by Kiln (converted dtypes widen) and read back: the same values.
  SafetensorsContents again = parse_safetensors(serialize_safetensors(c.tensors, c.metadata));
  for (const auto& [k, t] : c.tensors) CHECK(same_bits(again.tensors.at(k), t));
  CHECK(again.metadata == c.metadata);
}

TEST_CASE("torch: a torch state_dict loads into the equivalent Kiln module and computes the same") {
  auto expected = load_fixtures("io_expected.txt");
  std::string path = fixture("torch_model.safetensors");
  manual_seed(1);
  TorchNet net;
  auto before = snapshot(net);
  nn::Module::LoadResult r = load_state_dict(path, net, /*strict=*/true);
  CHECK(r.missing_keys.empty());
  CHECK(r.unexpected_keys.empty());
  CHECK(snapshot(net) != before);
  auto state = net.state_dict();
  CHECK(state.size() == 7);
  for (const auto& kt : state) {
    const auto& k = kt.first;
    const auto& t = kt.second;
    CAPTURE(k);
    REQUIRE(expected.count("model." + k));
    CHECK(equal(t, expected.at("model." + k)));
  }
  // Parameters are still the module's own tensors (loaded in place), still trainable.
  CHECK(net.seq->operator[](0)->named_parameters()[0].second.requires_grad());
  CHECK(same_bits(std::static_pointer_cast<nn::Linear>((*net.seq)[3])->bias, expected.at("model.seq.3.bias")));
  Tensor out = net.forward(expected.at("forward.in"));
  CHECK(allclose(out, expected.at("forward.out"), 1e-5, 1e-6));
  // The metadata torch wrote is there for whoever reads it.
  CHECK(load_safetensors(path).metadata.at("format") == "pt");
}

TEST_CASE("torch: Kiln writes the same bytes as the reference implementation") {
  auto expected = load_fixtures("io_expected.txt");
  for (const char* file : {"torch_mixed.safetensors", "torch_model.safetensors"}) {
    CAPTURE(file);
    std::string path = fixture(file);
    const std::string bytes = read_bytes(path);
    SafetensorsContents c = parse_safetensors(bytes, path);
    CHECK(serialize_safetensors(c.tensors, c.metadata) == bytes);
  }
  SafetensorsContents c = load_safetensors(fixture("torch_mixed.safetensors"));
  CHECK(c.metadata == Metadata{{"format", "pt"}, {"note", "tab\there \"quoted\" \\ caf\xC3\xA9"}});
  size_t compared = 0;
  for (const auto& entry : expected) {
    const auto& name = entry.first;
    const auto& want = entry.second;
    if (name.rfind("mixed.", 0) != 0) continue;
    CAPTURE(name);
    const Tensor& got = c.tensors.at(name.substr(6));
    CHECK(got.dtype() == want.dtype());
    CHECK(got.shape() == want.shape());
    CHECK(equal(got, want));
    ++compared;
  }
  CHECK(compared == 7);
  CHECK(c.tensors.size() == 7);
}

// ====================================================================== state dicts

TEST_CASE("state_dict: save and load a module, strict") {
  fs::path dir = fresh_dir("state");
  std::string path = (dir / "net.safetensors").string();
  manual_seed(3);
  TorchNet a;
  save_state_dict(path, a, {{"epoch", "3"}});
  manual_seed(4);
  TorchNet b;
  REQUIRE(snapshot(a) != snapshot(b));
  Tensor weight_handle = b.emb->weight;
  auto r = load_state_dict(path, b);
  CHECK(r.missing_keys.empty());
  CHECK(r.unexpected_keys.empty());
  CHECK(snapshot(a) == snapshot(b));
  CHECK(weight_handle.impl() == b.emb->weight.impl());  // loaded in place
  CHECK(load_safetensors(path).metadata == Metadata{{"epoch", "3"}});
  // The keys in the file are the dotted names PyTorch uses.
  auto keys = load_safetensors(path).tensors;
  for (const char* k : {"emb.weight", "seq.0.weight", "seq.0.bias", "seq.1.weight", "seq.1.bias", "seq.3.weight",
                        "seq.3.bias"})
    CHECK(keys.count(k));
  CHECK(keys.size() == 7);
  CHECK(list_dir(dir) == std::vector<std::string>{"net.safetensors"});  // no temporary file left
}

TEST_CASE("state_dict: missing and unexpected keys (strict lists them, non-strict loads the rest)") {
  fs::path dir = fresh_dir("keys");
  std::string path = (dir / "partial.safetensors").string();
  manual_seed(5);
  TorchNet src;
  auto state = src.state_dict();
  TensorMap file;
  for (const auto& [k, t] : state)
    if (k != "seq.1.bias" && k != "emb.weight") file[k] = t;
  file["seq.9.weight"] = ones({2});
  file["extra"] = zeros({1});
  save_safetensors(path, file);

  manual_seed(6);
  TorchNet dst;
  auto before = snapshot(dst);
  std::string msg = error_of([&] { load_state_dict(path, dst, /*strict=*/true); });
  CHECK(msg.rfind("[load_state_dict] " + path + ": Error(s) in loading state_dict for Net:", 0) == 0);
  CHECK(contains(msg, "missing keys: \"emb.weight\""));
  CHECK(contains(msg, "\"seq.1.bias\""));
  CHECK(contains(msg, "unexpected keys:"));
  CHECK(contains(msg, "\"seq.9.weight\""));
  CHECK(contains(msg, "\"extra\""));
  CHECK(snapshot(dst) == before);  // nothing loaded

  auto r = load_state_dict(path, dst, /*strict=*/false);
  std::sort(r.missing_keys.begin(), r.missing_keys.end());
  std::sort(r.unexpected_keys.begin(), r.unexpected_keys.end());
  CHECK(r.missing_keys == std::vector<std::string>{"emb.weight", "seq.1.bias"});
  CHECK(r.unexpected_keys == std::vector<std::string>{"extra", "seq.9.weight"});
  auto after = dst.state_dict();
  for (const auto& kt : after) {
    const auto& k = kt.first;
    const auto& t = kt.second;
    CAPTURE(k);
    if (k == "emb.weight" || k == "seq.1.bias") CHECK(before.at(k) == snapshot(dst).at(k));  // kept
    else CHECK(same_bits(t, state.at(k)));                                                 // loaded
  }
}

TEST_CASE("state_dict: a shape mismatch names the key and both, and loads nothing; dtypes convert") {
  fs::path dir = fresh_dir("mismatch");
  manual_seed(7);
  TorchNet src;
  manual_seed(8);
  TorchNet dst;
  auto before = snapshot(dst);

  // "emb.weight" sorts first: a loader that copied as it checked would have changed it.
  const nn::StateDict src_state = src.state_dict();
  TensorMap file(src_state.begin(), src_state.end());
  file["seq.3.weight"] = zeros({3, 4});
  std::string path = (dir / "shape.safetensors").string();
  save_safetensors(path, file);
  for (bool strict : {true, false}) {
    std::string msg = error_of([&] { load_state_dict(path, dst, strict); });
    CHECK(msg.rfind("[load_state_dict] " + path + ": size mismatch for seq.3.weight", 0) == 0);
    CHECK(contains(msg, "(3, 4)"));
    CHECK(contains(msg, "(2, 4)"));
    CHECK(snapshot(dst) == before);
  }

  // A float64 tensor in the file loads into the float32 model, converted as torch's copy_.
  file = TensorMap(src_state.begin(), src_state.end());
  file["seq.1.bias"] = full({4}, 0.1, kFloat64);
  path = (dir / "dtype.safetensors").string();
  save_safetensors(path, file);
  load_state_dict(path, dst);
  CHECK(dst.state_dict().at("seq.1.bias").dtype() == kFloat32);
  CHECK(same_bits(dst.state_dict().at("seq.1.bias"), full({4}, 0.1, kFloat64).to(kFloat32)));

  // A float64 model takes the float64 file.
  dst.to(kFloat64);
  file = {};
  for (const auto& [k, t] : src.state_dict()) file[k] = t.to(kFloat64);
  path = (dir / "f64.safetensors").string();
  save_safetensors(path, file);
  load_state_dict(path, dst);
  for (const auto& [k, t] : dst.state_dict()) CHECK(same_bits(t, file.at(k)));
}

// ====================================================================== broken files

TEST_CASE("safetensors: a missing file or a directory is an error naming the path") {
  fs::path dir = fresh_dir("missing");
  std::string path = (dir / "nope.safetensors").string();
  std::string msg = error_of([&] { load_safetensors(path); });
  CHECK(msg.rfind("[safetensors] " + path + ": cannot open", 0) == 0);
  CHECK(contains(msg, "No such file"));
  msg = error_of([&] { load_safetensors(dir.string()); });
  CHECK(contains(msg, dir.string()));
  CHECK(contains(msg, "is a directory"));
  TorchNet net;
  auto before = snapshot(net);
  CHECK(contains(error_of([&] { load_state_dict(path, net); }), "cannot open"));
  CHECK(snapshot(net) == before);
}

TEST_CASE("safetensors: files shorter than 8 bytes, and header sizes past the end") {
  for (size_t n : {0, 1, 7}) {
    CAPTURE(n);
    std::string msg = parse_error(std::string(n, '\0'));
    CHECK(msg.rfind("[safetensors] bad.safetensors: file is truncated", 0) == 0);
    CHECK(contains(msg, std::to_string(n) + " bytes, too short for the 8-byte header size"));
  }
  std::string msg = parse_error(st_bytes("{}").substr(0, 9));  // size says 2, 1 byte follows
  CHECK(contains(msg, "header size 2 runs past the end of the file (9 bytes)"));
  msg = parse_error(u64le(100) + "{}");
  CHECK(contains(msg, "header size 100 runs past the end of the file (10 bytes)"));
  // Sizes that would overflow a careless n + 8.
  for (uint64_t n : {std::numeric_limits<uint64_t>::max(), std::numeric_limits<uint64_t>::max() - 7,
                     uint64_t{1} << 63}) {
    CAPTURE(n);
    CHECK(contains(parse_error(u64le(n) + "{}      "), "runs past the end of the file"));
  }
  CHECK(contains(parse_error(u64le(0)), "header size 0 is too small"));
  CHECK(contains(parse_error(u64le(1) + "{"), "header size 1 is too small"));
}

TEST_CASE("safetensors: a corrupt header is an error naming the file and the byte") {
  struct Case {
    std::string header;
    const char* message;
  };
  const Case cases[] = {
      {"{\"a\": {\"dtype\": \"F32\"", "corrupt header: unexpected end at byte"},
      {"{\"a\" {}}", "corrupt header: expected ':'"},
      {"{\"a\": {}, \"a\": {}}", "corrupt header: duplicate key \"a\""},  // one name, two tensors
      {"{} trailing", "corrupt header: trailing characters"},
      {std::string("{\"a\0\": 1}", 9), "corrupt header: control character in string"},
      {"[]      ", "header is not a JSON object"},
      {"\"str\"   ", "header is not a JSON object"},
      {"{\"a\": 1}", "entry 'a' is not an object"},
      {"{\"a\": {\"shape\": [], \"data_offsets\": [0, 4]}}", "entry 'a' needs dtype, shape and data_offsets"},
      {"{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", "entry 'a' needs dtype, shape and data_offsets"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": []}}", "entry 'a' needs dtype, shape and data_offsets"},
      {"{\"a\": {\"dtype\": 5, \"shape\": [], \"data_offsets\": [0, 4]}}", "dtype of 'a' is not a string"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", "shape of 'a' is not an array"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", "shape of 'a' has an invalid dimension"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", "shape of 'a' has an invalid dimension"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [\"1\"], \"data_offsets\": [0, 4]}}", "shape of 'a' has an invalid dimension"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", "data_offsets of 'a' must be two non-negative integers"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", "data_offsets of 'a' must be two"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", "data_offsets of 'a' must be two"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [\"0\", \"4\"]}}", "data_offsets of 'a' must be two"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": {}}}", "data_offsets of 'a' must be two"},
      {"{\"__metadata__\": [], \"a\": {}}", "__metadata__ must be an object"},
      {"{\"__metadata__\": {\"k\": 1}}", "metadata value of 'k' is not a string"},
      {"{\"__metadata__\": {\"k\": null}}", "metadata value of 'k' is not a string"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.header);
    std::string msg = parse_error(st_bytes(c.header, std::string(4, '\0')));
    CHECK(msg.rfind("[safetensors] bad.safetensors: ", 0) == 0);
    CHECK(contains(msg, c.message));
  }
}

TEST_CASE("safetensors: unknown dtypes, sizes that do not match the offsets") {
  auto entry = [](const std::string& dtype, const std::string& shape, int b, int e) {
    return "{\"t\": {\"dtype\": \"" + dtype + "\", \"shape\": " + shape + ", \"data_offsets\": [" + std::to_string(b) +
           ", " + std::to_string(e) + "]}}";
  };
  std::string data(16, '\0');
  for (const char* dt : {"F8_E4M3", "U16", "U64", "C64", "f32", ""}) {
    CAPTURE(dt);
    CHECK(contains(parse_error(st_bytes(entry(dt, "[4]", 0, 16), data)),
                   "tensor 't' has unknown dtype '" + std::string(dt) + "'"));
  }
  std::string msg = parse_error(st_bytes(entry("F32", "[2, 3]", 0, 16), data));
  CHECK(contains(msg, "tensor 't' of shape (2, 3) and dtype F32 needs 24 bytes but its data_offsets span 16"));
  msg = parse_error(st_bytes(entry("F64", "[]", 0, 16), data));
  CHECK(contains(msg, "of shape () and dtype F64 needs 8 bytes but its data_offsets span 16"));
  msg = parse_error(st_bytes(entry("BOOL", "[0]", 0, 16), data));
  CHECK(contains(msg, "needs 0 bytes but its data_offsets span 16"));
  // The same bytes read as a matching shape work: the check is the size, not the dtype.
  CHECK(parse_safetensors(st_bytes(entry("F32", "[2, 2]", 0, 16), data)).tensors["t"].shape() == Shape{2, 2});
  CHECK(parse_safetensors(st_bytes(entry("I16", "[8]", 0, 16), data)).tensors["t"].numel() == 8);
}

TEST_CASE("safetensors: shapes too large for any file are refused before allocating") {
  // 2^61 float64 elements need 2^64 bytes: a product that wraps to 0 must not pass.
  CHECK(contains(parse_error(st_bytes("{\"t\": {\"dtype\": \"F64\", \"shape\": [2305843009213693952], "
                                      "\"data_offsets\": [0, 0]}}")),
                 "tensor 't' of shape (2305843009213693952,) and dtype F64 needs more than 2^64 bytes"));
  for (const std::string& shape : {std::string("[2305843009213693952]"), std::string("[4611686018427387904]"),
                                   std::string("[1073741824, 1073741824, 2]"), std::string("[0, 4611686018427387904]"),
                                   std::string("[9223372036854775807, 9223372036854775807]"),
                                   std::string("[0, 4611686018427387904, 4]"), std::string("[4611686018427387904, 0, 4]")}) {
    for (const std::string dt : {"F64", "F32", "BOOL"}) {
      CAPTURE(shape);
      CAPTURE(dt);
      std::string header = "{\"t\": {\"dtype\": \"" + dt + "\", \"shape\": " + shape +
                           ", \"data_offsets\": [0, 0]}}";
      std::string msg = parse_error(st_bytes(header));
      if (shape == "[0, 4611686018427387904]") {
        CHECK(msg.empty());  // no elements at all, and strides that fit
      } else {
        CHECK(msg.rfind("[safetensors] bad.safetensors: ", 0) == 0);
        CHECK((contains(msg, "is too large") || contains(msg, "bytes but its data_offsets span 0")));
      }
    }
  }
}

TEST_CASE("safetensors: BOOL bytes other than 0 and 1 read as true") {
  std::string file = st_bytes("{\"m\":{\"dtype\":\"BOOL\",\"shape\":[4],\"data_offsets\":[0,4]}}", std::string("\0\1\2\xff", 4));
  Tensor m = parse_safetensors(file).tensors.at("m");
  CHECK(m.dtype() == kBool);
  CHECK(m.to_vector<bool>() == std::vector<bool>{false, true, true, true});
  CHECK(m.sum().item() == 3);
}

TEST_CASE("safetensors: data offsets past the end, out of order, overlapping, or leaving holes") {
  auto two = [](int a0, int a1, int b0, int b1) {
    return "{\"a\": {\"dtype\": \"F32\", \"shape\": [" + std::to_string((a1 - a0) / 4) + "], \"data_offsets\": [" +
           std::to_string(a0) + ", " + std::to_string(a1) + "]}, \"b\": {\"dtype\": \"F32\", \"shape\": [" +
           std::to_string((b1 - b0) / 4) + "], \"data_offsets\": [" + std::to_string(b0) + ", " + std::to_string(b1) +
           "]}}";
  };
  std::string data = raw(std::vector<float>{1, 2, 3, 4});  // 16 bytes
  // Valid: in order, reversed in the header, and with a zero-size tensor in between.
  SafetensorsContents ok = parse_safetensors(st_bytes(two(0, 8, 8, 16), data));
  CHECK(ok.tensors["b"].to_vector<float>() == std::vector<float>{3, 4});
  ok = parse_safetensors(st_bytes(two(8, 16, 0, 8), data));
  CHECK(ok.tensors["a"].to_vector<float>() == std::vector<float>{3, 4});
  CHECK(ok.tensors["b"].to_vector<float>() == std::vector<float>{1, 2});

  std::string msg = parse_error(st_bytes(two(0, 8, 8, 24), data));
  CHECK(contains(msg, "data_offsets of 'b' [8, 24] run past the end of the data (16 bytes)"));
  CHECK(contains(msg, "truncated or corrupt"));
  msg = parse_error(st_bytes(two(0, 8, 1000000, 1000008), data));
  CHECK(contains(msg, "run past the end of the data"));
  msg = parse_error(st_bytes("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", data));
  CHECK(contains(msg, "data_offsets of 'a' are out of order: [8, 0]"));
  msg = parse_error(st_bytes(two(0, 12, 8, 16), data));
  CHECK(contains(msg, "data of 'b' [8, 16) overlaps the data of 'a' [0, 12)"));
  msg = parse_error(st_bytes(two(0, 16, 0, 16), data));
  CHECK(contains(msg, "overlaps"));
  msg = parse_error(st_bytes(two(0, 4, 8, 16), data));
  CHECK(contains(msg, "bytes [4, 8) of the data belong to no tensor (a hole before 'b')"));
  msg = parse_error(st_bytes(two(4, 8, 8, 16), data));
  CHECK(contains(msg, "bytes [0, 4) of the data belong to no tensor (a hole before 'a')"));
  msg = parse_error(st_bytes(two(0, 4, 4, 8), data));
  CHECK(contains(msg, "bytes [8, 16) at the end of the data belong to no tensor"));
  // Offsets beyond int64 are not numbers a file can use.
  msg = parse_error(st_bytes("{\"a\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [18446744073709551615, "
                             "18446744073709551615]}}"));
  CHECK(contains(msg, "integer out of range"));
}

TEST_CASE("safetensors: a truncated file, cut at any byte, is an error, never a crash") {
  std::string good = serialize_safetensors(
      {{"w", randn({3, 4})}, {"i", tensor({1, 2, 3}, kInt64)}, {"m", from_vector<bool>({true, false}, {2})}},
      {{"note", "x"}});
  REQUIRE(parse_safetensors(good).tensors.size() == 3);
  for (size_t len = 0; len < good.size(); ++len) {
    CAPTURE(len);
    std::string msg = parse_error(good.substr(0, len));
    CHECK(msg.rfind("[safetensors] bad.safetensors: ", 0) == 0);
  }
  // The most common truncation (a download cut short) names what is missing.
  CHECK(contains(parse_error(good.substr(0, good.size() - 1)), "run past the end of the data"));
  // Bytes appended after the data are also refused.
  CHECK(contains(parse_error(good + "junk"), "at the end of the data belong to no tensor"));
  // Every single-byte change of the header is either still valid or an error.
  uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  int refused = 0, loaded = 0;
  for (size_t i = 0; i < 8 + n; ++i) {
    for (char c : {'\0', '"', '9', '{', 'x', '\xff'}) {
      std::string bad = good;
      bad[i] = c;
      try {
        parse_safetensors(bad);
        ++loaded;
      } catch (const Error&) {
        ++refused;
      }  // any other exception, or a crash, fails the test
    }
  }
  CHECK(refused > 0);
  CHECK(loaded > 0);  // e.g. a changed letter of a metadata value
  CHECK(refused + loaded == static_cast<int>(6 * (8 + n)));
}

TEST_CASE("safetensors: a broken file leaves the module unchanged") {
  fs::path dir = fresh_dir("broken");
  manual_seed(11);
  TorchNet src;
  manual_seed(12);
  TorchNet dst;
  auto before = snapshot(dst);
  const nn::StateDict src_state = src.state_dict();
  std::string good = serialize_safetensors(TensorMap(src_state.begin(), src_state.end()));
  uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  const std::pair<std::string, std::string> broken[] = {
      {"truncated", good.substr(0, good.size() - 3)},
      {"short", good.substr(0, 5)},
      {"header", good.substr(0, 8) + std::string(n, ' ') + good.substr(8 + n)},
      {"trailing", good + std::string(4, '\0')},
  };
  for (const auto& entry : broken) {
    const auto& name = entry.first;
    const auto& bytes = entry.second;
    CAPTURE(name);
    std::string path = (dir / (name + ".safetensors")).string();
    write_bytes(path, bytes);
    std::string msg = error_of([&] { load_state_dict(path, dst, /*strict=*/false); });
    CHECK(msg.rfind("[safetensors] " + path + ": ", 0) == 0);
    CHECK(snapshot(dst) == before);
  }
}

// ====================================================================== atomic writes

TEST_CASE("save: writes are atomic; a failing save leaves the previous file and no temporary file") {
  fs::path dir = fresh_dir("atomic");
  std::string path = (dir / "model.safetensors").string();
  save_safetensors(path, {{"x", tensor({1.0, 2.0, 3.0})}}, {{"v", "1"}});
  const std::string good = read_bytes(path);
  CHECK(list_dir(dir) == std::vector<std::string>{"model.safetensors"});

  // Tensors that cannot be saved: nothing is written at all.
  std::string msg = error_of([&] { save_safetensors(path, {{"x", ones({2})}, {"undefined", Tensor()}}); });
  CHECK(contains(msg, "tensor 'undefined' is undefined"));
  CHECK(read_bytes(path) == good);
  msg = error_of([&] { save_safetensors(path, {{"__metadata__", ones({1})}}); });
  CHECK(contains(msg, "'__metadata__' is reserved"));
  CHECK(read_bytes(path) == good);
  CHECK(list_dir(dir) == std::vector<std::string>{"model.safetensors"});

  // A path that cannot be written: the error names it; nothing appears.
  std::string nowhere = (dir / "no_such_dir" / "model.safetensors").string();
  msg = error_of([&] { save_safetensors(nowhere, {{"x", ones({2})}}); });
  CHECK(msg.rfind("[save] cannot write '" + nowhere + "'", 0) == 0);
  CHECK(contains(msg, "No such file or directory"));
  CHECK_FALSE(fs::exists(dir / "no_such_dir"));

  // The rename fails (the destination is a non-empty directory): the temporary file is removed.
  fs::create_directories(dir / "occupied" / "child");
  std::string occupied = (dir / "occupied").string();
  msg = error_of([&] { save_safetensors(occupied, {{"x", ones({2})}}); });
  CHECK(contains(msg, "cannot rename"));
  CHECK(contains(msg, occupied));
  CHECK(fs::is_directory(dir / "occupied" / "child"));
  CHECK(list_dir(dir) == std::vector<std::string>{"model.safetensors", "occupied"});
  CHECK(read_bytes(path) == good);

  // A successful save replaces the content in one step and leaves only the file.
  save_safetensors(path, {{"y", zeros({4}, kInt64)}});
  CHECK(read_bytes(path) != good);
  CHECK(load_safetensors(path).tensors.count("y"));
  CHECK_FALSE(load_safetensors(path).tensors.count("x"));
  CHECK(list_dir(dir) == std::vector<std::string>{"model.safetensors", "occupied"});

  // A module's state_dict and a checkpoint go through the same path.
  TorchNet net;
  const std::string before = read_bytes(path);
  CHECK(contains(error_of([&] { save_state_dict(nowhere, net); }), "cannot write"));
  CHECK(contains(error_of([&] { save_checkpoint(nowhere, {&net}); }), "cannot write"));
  CHECK(contains(error_of([&] { save_checkpoint(path, {nullptr}); }), "[save_checkpoint] a checkpoint needs a model"));
  CHECK(read_bytes(path) == before);
  CHECK(list_dir(dir) == std::vector<std::string>{"model.safetensors", "occupied"});
}

TEST_CASE("save: write_file_atomic writes exactly the bytes, including none") {
  fs::path dir = fresh_dir("raw");
  std::string path = (dir / "f.bin").string();
  std::string bytes("a\0b\xff", 4);
  write_file_atomic(path, bytes);
  CHECK(read_bytes(path) == bytes);
  write_file_atomic(path, "");
  CHECK(read_bytes(path).empty());
  CHECK(list_dir(dir) == std::vector<std::string>{"f.bin"});
}

// ====================================================================== checkpoints

namespace {

struct Mlp : nn::Module {
  std::shared_ptr<nn::Sequential> net;
  Mlp() : Module("Mlp") {
    net = register_module("net", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
                                     std::make_shared<nn::Linear>(4, 16), std::make_shared<nn::ReLU>(),
                                     std::make_shared<nn::Dropout>(0.3), std::make_shared<nn::Linear>(16, 3)}));
  }
};

// Model, optimizer and schedule, built from the default generator's current state.
struct Trainer {
  std::shared_ptr<Mlp> model = std::make_shared<Mlp>();
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::CosineWarmupLR> sched;
  Trainer() {
    optim::AdamOptions o;
    o.lr = 0.02;
    o.weight_decay = 1e-3;
    // Two groups with their own options, as a real trainer has (no decay on biases).
    std::vector<Tensor> weights, biases;
    for (auto& [name, p] : model->named_parameters()) (name.find("bias") != std::string::npos ? biases : weights).push_back(p);
    opt = std::make_unique<optim::Adam>(
        std::vector<optim::ParamGroup>{optim::ParamGroup(weights), optim::ParamGroup(biases, {{"weight_decay", 0.0}})},
        o);
    sched = std::make_unique<optim::CosineWarmupLR>(*opt, 3, 20, 0.1);
  }
  CheckpointParts parts() { return {model.get(), opt.get(), sched.get(), &default_generator()}; }

  // One training step on batch `step` (data from its own generator; dropout draws from
  // the default one). Returns the loss.
  float step(int step) {
    Generator g(1000 + static_cast<uint64_t>(step));
    Tensor x = randn({8, 4}, {}, &g);
    Tensor y = randint(0, 3, {8}, kInt64, &g);
    opt->zero_grad();
    Tensor loss = cross_entropy(model->net->forward(x), y);
    loss.backward();
    opt->step();
    sched->step();
    return loss.item<float>();
  }
};

constexpr int kSteps = 12, kStop = 5;

std::vector<float> uninterrupted(std::map<std::string, std::string>* final_state = nullptr) {
  manual_seed(2024);
  Trainer t;
  std::vector<float> losses;
  for (int i = 0; i < kSteps; ++i) losses.push_back(t.step(i));
  if (final_state) *final_state = snapshot(*t.model);
  return losses;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("checkpoint: training resumed from a checkpoint continues bit for bit") {
  fs::path dir = fresh_dir("resume");
  std::string path = (dir / "ckpt.safetensors").string();
  std::map<std::string, std::string> final_uninterrupted;
  const std::vector<float> want = uninterrupted(&final_uninterrupted);
  REQUIRE(want.size() == kSteps);

  std::vector<float> got;
  {
    manual_seed(2024);
    Trainer t;
    for (int i = 0; i < kStop; ++i) got.push_back(t.step(i));
    save_checkpoint(path, t.parts(), {{"epoch", "1"}, {"note", "stopped at 5"}});
    for (int i = 0; i < 3; ++i) t.step(100 + i);  // training goes on after the save: must not matter
  }
  CHECK(list_dir(dir) == std::vector<std::string>{"ckpt.safetensors"});

  // A fresh process, as far as the state goes: other weights, other RNG position.
  manual_seed(77);
  Trainer t;
  randn({123});
  REQUIRE(snapshot(*t.model) != final_uninterrupted);
  Metadata user = load_checkpoint(path, t.parts());
  CHECK(user == Metadata{{"epoch", "1"}, {"note", "stopped at 5"}});
  CHECK(t.sched->last_step() == kStop);
  for (int i = kStop; i < kSteps; ++i) got.push_back(t.step(i));

  CHECK(bitwise_equal(got, want));
  CHECK(snapshot(*t.model) == final_uninterrupted);
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == want[i]);
  }
}

TEST_CASE("checkpoint: each part matters (the resume test would catch a missing one)") {
  fs::path dir = fresh_dir("parts");
  std::string path = (dir / "ckpt.safetensors").string();
  const std::vector<float> want = uninterrupted();
  {
    manual_seed(2024);
    Trainer t;
    for (int i = 0; i < kStop; ++i) t.step(i);
    save_checkpoint(path, t.parts());
  }
  auto resume = [&](bool rng, bool optimizer, bool scheduler) {
    manual_seed(77);
    Trainer t;
    randn({123});
    CheckpointParts p = t.parts();
    if (!rng) p.generator = nullptr;
    if (!optimizer) p.optimizer = nullptr;
    if (!scheduler) p.scheduler = nullptr;
    load_checkpoint(path, p);
    std::vector<float> losses(want.begin(), want.begin() + kStop);
    for (int i = kStop; i < kSteps; ++i) losses.push_back(t.step(i));
    return losses;
  };
  CHECK(bitwise_equal(resume(true, true, true), want));
  CHECK_FALSE(bitwise_equal(resume(false, true, true), want));  // dropout masks differ
  CHECK_FALSE(bitwise_equal(resume(true, false, true), want));  // Adam moments and step restart
  CHECK_FALSE(bitwise_equal(resume(true, true, false), want));  // the learning rate restarts
}

TEST_CASE("checkpoint: contents, and the state it restores") {
  fs::path dir = fresh_dir("contents");
  std::string path = (dir / "ckpt.safetensors").string();
  manual_seed(9);
  Trainer t;
  for (int i = 0; i < 4; ++i) t.step(i);
  GeneratorState rng = default_generator().get_state();
  save_checkpoint(path, t.parts(), {{"best_loss", "0.5"}});
  SafetensorsContents c = load_safetensors(path);
  CHECK(c.metadata.at("format") == "kiln-checkpoint-1");
  CHECK(c.metadata.at("scheduler.last_step") == "4");
  CHECK(c.metadata.at("rng.seed") == std::to_string(rng.seed));
  CHECK(c.metadata.at("rng.offset") == std::to_string(rng.offset));
  CHECK(c.metadata.at("user.best_loss") == "0.5");
  CHECK(c.tensors.count("model.net.0.weight"));
  CHECK(c.tensors.count("model.net.3.bias"));
  CHECK(c.tensors.count("optimizer.state.0.exp_avg"));
  CHECK(c.tensors.count("optimizer.param_groups.1.weight_decay"));
  CHECK(c.tensors.at("optimizer.param_groups.1.weight_decay").item() == 0.0);
  CHECK(c.tensors.at("optimizer.param_groups.0.weight_decay").item() == 1e-3);
  CHECK(same_bits(c.tensors.at("model.net.0.weight"), t.model->net->named_parameters()[0].second));

  manual_seed(10);
  Trainer u;
  randn({7});
  Metadata user = load_checkpoint(path, u.parts());
  CHECK(user == Metadata{{"best_loss", "0.5"}});
  CHECK(snapshot(*u.model) == snapshot(*t.model));
  CHECK(u.sched->last_step() == 4);
  CHECK(u.sched->get_last_lr() == t.sched->get_last_lr());
  CHECK(default_generator().get_state().seed == rng.seed);
  CHECK(default_generator().get_state().offset == rng.offset);
  auto a = u.opt->state_dict(), b = t.opt->state_dict();
  REQUIRE(a.size() == b.size());
  for (const auto& kv : b) {
    const auto& k = kv.first;
    const auto& v = kv.second;
    CAPTURE(k);
    REQUIRE(a.count(k));
    CHECK(equal(a.at(k).to(kFloat64), v.to(kFloat64)));
  }

  // A model alone: no optimizer, schedule or generator needed in the file.
  std::string model_only = (dir / "model_only.safetensors").string();
  save_checkpoint(model_only, {t.model.get(), nullptr, nullptr, nullptr});
  c = load_safetensors(model_only);
  CHECK_FALSE(c.metadata.count("rng.seed"));
  CHECK_FALSE(c.metadata.count("scheduler.last_step"));
  manual_seed(11);
  Mlp m;
  CHECK(load_checkpoint(model_only, {&m, nullptr, nullptr, nullptr}).empty());
  CHECK(snapshot(m) == snapshot(*t.model));
}

TEST_CASE("checkpoint: a ReduceLROnPlateau resumes where it stood; a bad state changes nothing") {
  fs::path dir = fresh_dir("plateau");
  auto model = std::make_shared<Mlp>();
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  const optim::ReduceLROnPlateauOptions options{.patience = 1, .cooldown = 2};
  optim::ReduceLROnPlateau plateau(opt, options);
  const std::string fresh = (dir / "fresh.safetensors").string();
  save_checkpoint(fresh, {model.get(), &opt, nullptr, nullptr, &plateau});  // best: +inf
  for (double m : {1.0, 0.5, 0.6, 0.7, 0.9}) plateau.step(m);  // reduced at 0.7, then in its cooldown
  REQUIRE(plateau.state().cooldown_counter == 1);
  const std::string path = (dir / "plateau.safetensors").string();
  save_checkpoint(path, {model.get(), &opt, nullptr, nullptr, &plateau});

  auto model2 = std::make_shared<Mlp>();
  optim::SGD opt2(model2->parameters(), {.lr = 0.1});
  optim::ReduceLROnPlateau plateau2(opt2, options);
  load_checkpoint(fresh, {model2.get(), &opt2, nullptr, nullptr, &plateau2});
  CHECK(plateau2.state().best == std::numeric_limits<double>::infinity());
  load_checkpoint(path, {model2.get(), &opt2, nullptr, nullptr, &plateau2});
  CHECK(plateau2.state().best == 0.5);
  CHECK(plateau2.state().num_bad_epochs == plateau.state().num_bad_epochs);
  CHECK(plateau2.state().cooldown_counter == 1);
  CHECK(plateau2.state().last_step == 5);
  CHECK(opt2.param_groups()[0].get("lr") == opt.param_groups()[0].get("lr"));
  for (double m : {0.8, 0.9, 0.95, 0.4, 0.41, 0.42}) {
    plateau.step(m);
    plateau2.step(m);
    CHECK(opt2.param_groups()[0].get("lr") == opt.param_groups()[0].get("lr"));
  }
  CHECK(opt.param_groups()[0].get("lr") < 0.01);  // reduced again after the resume

  const SafetensorsContents contents = load_safetensors(path);
  const optim::ReduceLROnPlateau::State before = plateau2.state();
  struct Bad {
    std::string key, value, message;  // value "": the key left out
  };
  for (const Bad& b : std::vector<Bad>{
           {"plateau.best", "nan", "metadata 'plateau.best' is not a number: 'nan'"},
           {"plateau.best", "0.5x", "metadata 'plateau.best' is not a number: '0.5x'"},
           {"plateau.best", "", "metadata 'plateau.best' is missing"},
           {"plateau.num_bad_epochs", "-1", "metadata 'plateau.num_bad_epochs' is not a number from 0 to"},
           {"plateau.cooldown_counter", "", "metadata 'plateau.cooldown_counter' is missing"},
           {"plateau.last_step", "1e3", "metadata 'plateau.last_step' is not a number from 0 to"}}) {
    CAPTURE(b.key);
    CAPTURE(b.value);
    SafetensorsContents c = contents;
    if (b.value.empty()) c.metadata.erase(b.key);
    else c.metadata[b.key] = b.value;
    const std::string p = (dir / "bad.safetensors").string();
    save_safetensors(p, c.tensors, c.metadata);
    CHECK(contains(error_of([&] { load_checkpoint(p, {model2.get(), &opt2, nullptr, nullptr, &plateau2}); }), b.message));
    CHECK(plateau2.state().best == before.best);
    CHECK(plateau2.state().last_step == before.last_step);
  }
}

TEST_CASE("checkpoint: a bad checkpoint is refused before anything changes") {
  fs::path dir = fresh_dir("bad_ckpt");
  std::string good = (dir / "good.safetensors").string();
  manual_seed(21);
  Trainer src;
  for (int i = 0; i < 3; ++i) src.step(i);
  save_checkpoint(good, src.parts());
  const SafetensorsContents contents = load_safetensors(good);

  // Writes a variant of the good checkpoint.
  auto variant = [&](const std::string& name, auto&& edit) {
    SafetensorsContents c = contents;
    edit(c);
    std::string p = (dir / (name + ".safetensors")).string();
    save_safetensors(p, c.tensors, c.metadata);
    return p;
  };

  manual_seed(22);
  Trainer dst;
  dst.step(0);  // some optimizer state to lose
  randn({5});
  auto model_before = snapshot(*dst.model);
  auto opt_before = snapshot(*dst.opt);
  const int64_t step_before = dst.sched->last_step();
  const GeneratorState rng_before = default_generator().get_state();
  auto unchanged = [&] {
    CHECK(snapshot(*dst.model) == model_before);
    CHECK(snapshot(*dst.opt) == opt_before);
    CHECK(dst.sched->last_step() == step_before);
    CHECK(default_generator().get_state().offset == rng_before.offset);
    CHECK(default_generator().get_state().seed == rng_before.seed);
  };

  struct Case {
    std::string path;
    std::string message;
  };
  std::vector<Case> cases;
  {
    std::string p = (dir / "state_dict.safetensors").string();
    save_state_dict(p, *src.model);
    cases.push_back({p, "not a Kiln training checkpoint (metadata 'format' is 'missing')"});
  }
  cases.push_back({variant("format", [](SafetensorsContents& c) { c.metadata["format"] = "kiln-checkpoint-0"; }),
                   "metadata 'format' is 'kiln-checkpoint-0'"});
  cases.push_back({variant("no_step", [](SafetensorsContents& c) { c.metadata.erase("scheduler.last_step"); }),
                   "metadata 'scheduler.last_step' is missing"});
  int variant_id = 0;
  for (const char* bad : {"-1", "abc", " 3", "3 ", "+3", "", "1e3", "9223372036854775808"})
    cases.push_back({variant("step" + std::to_string(variant_id++), [&](SafetensorsContents& c) { c.metadata["scheduler.last_step"] = bad; }),
                     "metadata 'scheduler.last_step' is not a number from 0 to 9223372036854775807: '" +
                         std::string(bad) + "'"});
  cases.push_back({variant("rng", [](SafetensorsContents& c) { c.metadata["rng.offset"] = "18446744073709551616"; }),
                   "metadata 'rng.offset' is not a number"});
  cases.push_back({variant("no_seed", [](SafetensorsContents& c) { c.metadata.erase("rng.seed"); }),
                   "metadata 'rng.seed' is missing"});
  cases.push_back({variant("stray", [](SafetensorsContents& c) { c.tensors["loose"] = ones({1}); }),
                   "unexpected tensor 'loose'"});
  cases.push_back({variant("no_opt",
                           [](SafetensorsContents& c) {
                             for (auto it = c.tensors.begin(); it != c.tensors.end();)
                               it = it->first.rfind("optimizer.", 0) == 0 ? c.tensors.erase(it) : std::next(it);
                           }),
                   "the checkpoint holds no optimizer state"});
  cases.push_back({variant("missing_param", [](SafetensorsContents& c) { c.tensors.erase("model.net.3.bias"); }),
                   "missing keys: \"net.3.bias\""});
  cases.push_back({variant("extra_param", [](SafetensorsContents& c) { c.tensors["model.net.5.weight"] = ones({1}); }),
                   "unexpected keys: \"net.5.weight\""});
  cases.push_back({variant("param_shape", [](SafetensorsContents& c) { c.tensors["model.net.3.weight"] = ones({3, 15}); }),
                   "size mismatch for net.3.weight"});
  cases.push_back({variant("moment_shape",
                           [](SafetensorsContents& c) { c.tensors["optimizer.state.1.exp_avg"] = zeros({2}); }),
                   "state 'state.1.exp_avg' has shape (2,) but parameter 1 has shape (3, 16)"});
  cases.push_back({variant("opt_key", [](SafetensorsContents& c) { c.tensors["optimizer.bogus"] = zeros({1}); }),
                   "unexpected optimizer key 'bogus'"});
  cases.push_back({variant("opt_index", [](SafetensorsContents& c) { c.tensors["optimizer.state.99.exp_avg"] = zeros({1}); }),
                   "state for parameter 99 but the optimizer has 4 parameters"});
  {
    std::string p = (dir / "truncated.safetensors").string();
    std::string bytes = read_bytes(good);
    write_bytes(p, bytes.substr(0, bytes.size() - 1));
    cases.push_back({p, "run past the end of the data"});
  }
  cases.push_back({(dir / "absent.safetensors").string(), "cannot open"});

  for (const auto& c : cases) {
    CAPTURE(c.path);
    std::string msg = error_of([&] { load_checkpoint(c.path, dst.parts()); });
    CHECK(contains(msg, c.message));
    CHECK(contains(msg, c.path));
    unchanged();
  }
  CHECK(contains(error_of([&] { load_checkpoint(good, {nullptr}); }), "[load_checkpoint] a checkpoint needs a model"));
  unchanged();

  // And the good one loads.
  load_checkpoint(good, dst.parts());
  CHECK(snapshot(*dst.model) == snapshot(*src.model));
  CHECK(dst.sched->last_step() == 3);
}

// ====================================================================== trainer checkpoints and temporaries

namespace {

kiln::testing::ToyTask toy() {
  return kiln::testing::toy_task({{"ich mochte ein bier", "i want a beer ."},
                                  {"ich mochte ein cola", "i want a coke ."},
                                  {"du mochtest ein bier", "you want a beer ."}});
}

tr::TrainerOptions trainer_options(int64_t epochs) {
  tr::TrainerOptions o;
  o.epochs = epochs;
  o.lr_factor = 0.5;
  o.warmup_steps = 10;
  o.label_smoothing = 0.1;
  o.progress = false;
  return o;
}

// A copy of checkpoint `from` at `to` with the user metadata entry `key` set to `value`
// (or removed when value is null): a valid file with a bad value.
void rewrite_entry(const std::string& from, const std::string& to, const std::string& key, const char* value) {
  io::SafetensorsContents c = io::load_safetensors(from);
  if (value) c.metadata["user." + key] = value;
  else c.metadata.erase("user." + key);
  io::save_safetensors(to, c.tensors, c.metadata);
}

bool same_weights(tr::Seq2SeqTransformer& a, tr::Seq2SeqTransformer& b) {
  for (const auto& [name, p] : a.state_dict())
    if (!equal(p, b.state_dict().at(name))) return false;
  return true;
}

// A pid no process has: pid_max itself (pids are below it).
long absent_pid() {
  std::ifstream in("/proc/sys/kernel/pid_max");
  long pid_max = 0;
  in >> pid_max;
  return pid_max > 0 ? pid_max : 4194304;
}

void touch(const std::string& path) { std::ofstream(path) << "partial"; }

}  // namespace

TEST_CASE("Trainer::load checks every metadata value, names the entry and changes nothing") {
  kiln::testing::ToyTask t = toy();
  data::PairDataLoader loader(t.pairs, {.batch_size = 2, .shuffle = false});  // 2 batches an epoch
  ScratchDir dir("trainer_meta");
  manual_seed(3);
  tr::Seq2SeqTransformer a(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.0));
  tr::TrainerOptions o = trainer_options(2);
  o.checkpoint_dir = dir / "ck";
  {
    tr::Trainer trainer(a, loader, nullptr, o);
    trainer.fit();  // 4 steps; last.safetensors is step 4's
  }
  const std::string good = dir / "ck/last.safetensors";
  const io::Metadata meta = io::load_safetensors_metadata(good);
  REQUIRE(meta.count("user.trainer.global_step"));

  struct Case {
    const char* key;
    const char* value;
    const char* message;
  };
  const Case cases[] = {
      {"trainer.global_step", "1e214", "'trainer.global_step' must be an integer from 0 to"},
      {"trainer.global_step", "-5", "'trainer.global_step' must be an integer"},
      {"trainer.global_step", "nan", "'trainer.global_step' must be an integer"},
      {"trainer.global_step", "99999999999999999999", "'trainer.global_step' must be an integer"},
      {"trainer.global_step", " 4", "'trainer.global_step' must be an integer"},
      {"trainer.epoch", "abc", "'trainer.epoch' must be an integer"},
      {"trainer.epoch", "", "'trainer.epoch' must be an integer"},
      {"trainer.next_batch", "-5", "'trainer.next_batch' must be an integer from 0 to 1, got '-5'"},
      {"trainer.next_batch", "2", "'trainer.next_batch' must be an integer from 0 to 1, got '2'"},
      {"trainer.best_loss", "nan", "'trainer.best_loss' must be a non-negative number or inf"},
      {"trainer.best_loss", "-1", "'trainer.best_loss' must be a non-negative number or inf"},
      {"trainer.step_losses", "1.5,nan", "'trainer.step_losses[1]' must be a finite non-negative number"},
      {"trainer.step_losses", "1.5,,2", "'trainer.step_losses[1]' must be a finite"},
      {"trainer.step_losses", "1,2,3,4,5,6,7,8", "8 entries in 'trainer.step_losses' but 'trainer.global_step' is"},
      {"trainer.epoch_loss_sum", "inf", "'trainer.epoch_loss_sum' must be a finite non-negative number"},
      {"trainer.epoch_loss_sum", "1e400", "'trainer.epoch_loss_sum' must be a finite"},
      {"trainer.global_step", nullptr, "has no 'trainer.global_step' entry"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.key);
    CAPTURE(c.value ? c.value : "(removed)");
    const std::string bad = dir / "bad.safetensors";
    rewrite_entry(good, bad, c.key, c.value);
    manual_seed(7);
    tr::Seq2SeqTransformer b(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.0));
    manual_seed(7);
    tr::Seq2SeqTransformer untouched(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.0));
    tr::Trainer trainer(b, loader, nullptr, trainer_options(2));
    const std::string e = error_of([&] { trainer.load(bad); });
    CHECK(e.rfind("[Trainer::load] checkpoint '" + bad + "'", 0) == 0);
    CHECK_MESSAGE(e.find(c.message) != std::string::npos, e);
    // Nothing changed: the weights and where the run is.
    CHECK(same_weights(b, untouched));
    CHECK(trainer.global_step() == 0);
  }
  // The unchanged file loads.
  tr::Seq2SeqTransformer b(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.0));
  tr::Trainer trainer(b, loader, nullptr, trainer_options(2));
  trainer.load(good);
  CHECK(trainer.global_step() == 4);
  CHECK(same_weights(a, b));
}

TEST_CASE("Trainer: step_losses keeps the newest step_losses_kept and checkpoints carry no more") {
  kiln::testing::ToyTask t = toy();
  data::PairDataLoader loader(t.pairs, {.batch_size = 1, .shuffle = true, .seed = 2});  // 3 batches an epoch
  ScratchDir dir("trainer_kept");
  manual_seed(3);
  tr::Seq2SeqTransformer a(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.1));
  tr::TrainerOptions o = trainer_options(4);  // 12 steps
  o.step_losses_kept = 2;
  o.checkpoint_dir = dir / "ck";
  o.checkpoint_every = 5;  // step 5: mid-epoch 2, with more steps before it than kept
  o.checkpoint_keep_last = 100;
  tr::Trainer ta(a, loader, nullptr, o);
  std::vector<tr::EpochSummary> sa = ta.fit();
  REQUIRE(sa.size() == 4);
  CHECK(ta.global_step() == 12);
  CHECK(ta.step_losses().size() == 2);
  const io::Metadata meta = io::load_safetensors_metadata(dir / "ck/last.safetensors");
  const std::string losses = meta.at("user.trainer.step_losses");
  CHECK(std::count(losses.begin(), losses.end(), ',') == 1);  // two losses, not twelve

  // Resumed from step 5 (mid-epoch 2; the file has 2 losses, only one of them of this
  // epoch): the epoch's mean is still bitwise the uninterrupted run's.
  manual_seed(99);
  tr::Seq2SeqTransformer b(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.1));
  tr::TrainerOptions ob = o;
  ob.checkpoint_dir = dir / "ck_b";
  ob.resume_from = dir / "ck/ckpt-000000005.safetensors";
  tr::Trainer tb(b, loader, nullptr, ob);
  REQUIRE(tb.global_step() == 5);
  CHECK(tb.step_losses().size() == 2);
  std::vector<tr::EpochSummary> sb = tb.fit();
  REQUIRE(sb.size() == 3);
  CHECK(sb[0].epoch == 2);
  CHECK(sb[0].train_loss == sa[1].train_loss);  // bitwise
  CHECK(sb[2].train_loss == sa[3].train_loss);
  CHECK(tb.step_losses() == ta.step_losses());
  CHECK(same_weights(a, b));
}

TEST_CASE("Trainer: step_losses_kept must be non-negative") {
  kiln::testing::ToyTask t = toy();
  tr::Seq2SeqTransformer m(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.0));
  tr::TrainerOptions o = trainer_options(1);
  o.step_losses_kept = -1;
  CHECK_ERROR_STARTS("[Trainer]", tr::Trainer(m, o), "step_losses_kept must be non-negative, got -1");
}

TEST_CASE("save_safetensors removes its file's temporaries of a dead process, not a live one's") {
  ScratchDir dir("temps");
  const std::string target = dir / "w.safetensors";
  const std::string dead = target + ".tmp." + std::to_string(absent_pid()) + ".0";
  const std::string absurd = target + ".tmp.99999999999999.3";  // no pid_t holds it
  const std::string live = target + ".tmp." + std::to_string(::getpid()) + ".7";
  const std::string other = dir / ("x.safetensors.tmp." + std::to_string(absent_pid()) + ".0");  // another file's
  const std::string unrelated = dir / "w.safetensors.tmp.notes";
  for (const std::string& p : {dead, absurd, live, other, unrelated}) touch(p);

  io::save_safetensors(target, {{"a", ones({2})}});
  CHECK_FALSE(fs::exists(dead));
  CHECK_FALSE(fs::exists(absurd));
  CHECK(fs::exists(live));
  CHECK(fs::exists(other));
  CHECK(fs::exists(unrelated));
  CHECK(fs::exists(target));

  // save_checkpoint writes through the same function.
  touch(dead);
  nn::Linear model(2, 2);
  io::save_checkpoint(target, {&model});
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));
}

TEST_CASE("CheckpointManager reads the best file's metric strictly: garbage is no metric") {
  ScratchDir dir("manager_metric");
  nn::Linear model(2, 2);
  {
    train::CheckpointManager m(dir.path.string());
    m.save(1, {&model}, {}, 2.0);
  }
  // A metric of "0.5x" was read as 0.5 (strtod's prefix), better than any real loss.
  const std::string best = dir / "best.safetensors";
  io::SafetensorsContents c = io::load_safetensors(best);
  c.metadata["user.checkpoint_manager.metric"] = "0.5x";
  fs::remove(best);  // a hard link of the step file: write a file of its own
  io::save_safetensors(best, c.tensors, c.metadata);
  train::CheckpointManager m(dir.path.string());
  CHECK(std::isnan(m.best_metric()));
  CHECK(m.save(2, {&model}, {}, 1.0).best);
}

TEST_CASE("load_checkpoint refuses model weights that are not finite, naming the tensor, and changes nothing") {
  using namespace kiln;
  const std::string path =
      (fs::temp_directory_path() / ("kiln_nonfinite_" + std::to_string(::getpid()) + ".safetensors")).string();
  for (double bad : {NAN, INFINITY, -INFINITY}) {
    CAPTURE(bad);
    nn::Linear saved(3, 2);
    optim::Adam saved_opt(saved.parameters(), optim::AdamOptions{});
    {
      NoGradGuard no_grad;
      saved.bias.fill_(bad);
    }
    io::save_checkpoint(path, {&saved, &saved_opt});
    nn::Linear model(3, 2);
    optim::Adam opt(model.parameters(), optim::AdamOptions{});
    const Tensor before = model.weight.clone();
    CHECK_ERROR_STARTS("[load_checkpoint]", io::load_checkpoint(path, {&model, &opt}), "'model.bias'",
                       "NaN or infinite");
    CHECK(equal(model.weight, before));
  }
  fs::remove(path);
}

// ====================================================================== averaged checkpoints

namespace {

// A weight and an integer buffer: what averaging treats differently.
struct Averaged : kiln::nn::Module {
  kiln::Tensor w, steps;
  Averaged() : Module("Averaged") {
    w = register_parameter("w", kiln::zeros({2, 3}));
    steps = register_buffer("steps", kiln::zeros({1}, kiln::kInt64));
  }
};

}  // namespace

TEST_CASE("load_averaged_checkpoints: the float64 mean of the weights, integer buffers from the last file") {
  using namespace kiln;
  const fs::path dir = fresh_dir("averaged");
  const std::vector<std::vector<double>> values = {
      {0.1, -2.0, 3.5, 1e-8, 7.0, 0.3}, {0.2, 2.5, -1.0, 3e-8, 7.0, 0.1}, {0.4, 0.25, 1.0, -2e-8, 7.0, 1.0 / 3}};
  std::vector<std::string> paths;
  for (size_t i = 0; i < values.size(); ++i) {
    Averaged m;
    {
      NoGradGuard no_grad;
      m.w.copy_(from_vector<double>(values[i], {2, 3}).to(kFloat32));
      m.steps.fill_(static_cast<double>(10 * (i + 1)));
    }
    paths.push_back((dir / ("ckpt" + std::to_string(i) + ".safetensors")).string());
    // A training checkpoint (with an optimizer's tensors beside the model's) and plain state dicts mix.
    optim::Adam opt(m.parameters(), optim::AdamOptions{});
    if (i == 1) io::save_checkpoint(paths.back(), {&m, &opt});
    else io::save_state_dict(paths.back(), m);
  }
  Averaged avg;
  io::load_averaged_checkpoints(paths, avg);
  const std::vector<float> got = avg.w.contiguous().to_vector<float>();
  for (size_t j = 0; j < 6; ++j) {
    // The file holds float32 values; their mean is taken in float64, then rounded once.
    double sum = 0;
    for (const auto& v : values) sum += static_cast<double>(static_cast<float>(v[j]));
    CHECK(got[j] == static_cast<float>(sum / 3));
  }
  CHECK(avg.steps.item<int64_t>() == 30);
  CHECK(avg.w.requires_grad());

  Averaged one;  // one file: its own weights
  io::load_averaged_checkpoints({paths[0]}, one);
  CHECK(equal(one.w, from_vector<double>(values[0], {2, 3}).to(kFloat32)));
}

TEST_CASE("load_averaged_checkpoints: a bad file is refused, naming it, before the model changes") {
  using namespace kiln;
  const fs::path dir = fresh_dir("averaged_bad");
  Averaged good;
  const std::string good_path = (dir / "good.safetensors").string();
  io::save_state_dict(good_path, good);
  Averaged model;
  {
    NoGradGuard no_grad;
    model.w.fill_(5.0);
  }
  const Tensor before = model.w.clone();
  auto unchanged = [&] { CHECK(equal(model.w, before)); };

  CHECK_ERROR_STARTS("[load_averaged_checkpoints]", io::load_averaged_checkpoints({}, model), "no files given");
  unchanged();
  const std::string missing = (dir / "missing.safetensors").string();
  CHECK_ERROR(io::load_averaged_checkpoints({good_path, missing}, model), missing.c_str());
  unchanged();

  nn::Linear other(3, 2);  // other keys
  const std::string other_path = (dir / "other.safetensors").string();
  io::save_state_dict(other_path, other);
  CHECK_ERROR_STARTS("[load_averaged_checkpoints]", io::load_averaged_checkpoints({good_path, other_path}, model),
                     other_path.c_str(), "missing keys: \"w\"");
  unchanged();

  // The same keys, another shape.
  io::save_safetensors((dir / "shape.safetensors").string(), {{"w", zeros({3, 3})}, {"steps", zeros({1}, kInt64)}});
  CHECK_ERROR_STARTS("[load_averaged_checkpoints]",
                     io::load_averaged_checkpoints({good_path, (dir / "shape.safetensors").string()}, model),
                     "shape.safetensors: size mismatch for w");
  unchanged();

  for (double bad : {NAN, INFINITY}) {
    CAPTURE(bad);
    const std::string path = (dir / "nonfinite.safetensors").string();
    Tensor w = zeros({2, 3});
    w.select(0, 1).fill_(bad);
    io::save_safetensors(path, {{"w", w}, {"steps", zeros({1}, kInt64)}});
    CHECK_ERROR_STARTS("[load_averaged_checkpoints]", io::load_averaged_checkpoints({good_path, path}, model),
                       path.c_str(), "'w'", "NaN or infinite");
    unchanged();
  }
}
