// GGUF (io/gguf.h) and ggml's block types (backend/quant_blocks.h) against gguf-py, the
// Python package of llama.cpp: tests/fixtures/gguf_small.gguf and gguf.txt, written by
// make_gguf_fixtures.py. Reading, dequantising and quantising give gguf-py's values and
// bytes exactly, the writer lays files out as gguf-py's GGUFWriter, every bad file is a
// kiln::Error naming the field and its offset; and SmolLM2-135M's real file reads as
// gguf-py reads it (when scripts/fetch_models.sh has fetched it).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/float16.h"
#include "test_util.h"

using namespace kiln;
using namespace kiln::io;

namespace {

const testing::FixtureFile kFixtures("gguf.txt", "make_gguf_fixtures.py");

std::string fixture_path(const std::string& name) {
  const char* dir = std::getenv("KILN_FIXTURES");
  REQUIRE_MESSAGE(dir != nullptr, "KILN_FIXTURES is not set");
  return std::string(dir) + "/" + name;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read ", path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

const std::vector<std::pair<std::string, GGMLType>> kTypes = {
    {"f32", GGMLType::F32},   {"f16", GGMLType::F16},   {"bf16", GGMLType::BF16},
    {"q8_0", GGMLType::Q8_0}, {"q4_0", GGMLType::Q4_0}, {"q4_1", GGMLType::Q4_1}};

// Read and dequantised, not written.
const std::vector<std::pair<std::string, GGMLType>> kReadOnly = {{"q5_0", GGMLType::Q5_0}, {"q5_1", GGMLType::Q5_1},
                                                                 {"q4_k", GGMLType::Q4_K}, {"q5_k", GGMLType::Q5_K},
                                                                 {"q6_k", GGMLType::Q6_K}};

// Bitwise equality of two float32 tensors (so -0 and 0 differ, NaN equals its bits).
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data<float>(), y.data<float>(), static_cast<size_t>(x.numel()) * 4) == 0;
}

std::string bytes_of(const GGUFFile& f, const GGUFTensorInfo& t) {
  return std::string(reinterpret_cast<const char*>(f.data(t)), static_cast<size_t>(t.nbytes));
}

}  // namespace

TEST_CASE("float16: every half round-trips through float32; floats round to nearest even") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = float_from_half_bits(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      CHECK(std::isnan(float_from_half_bits(half_bits_from_float(f))));
      continue;
    }
    if (half_bits_from_float(f) != h) FAIL_CHECK("half ", h, " -> ", f, " -> ", half_bits_from_float(f));
  }
  CHECK(half_bits_from_float(65504.0f) == 0x7BFF);
  CHECK(half_bits_from_float(65519.99f) == 0x7BFF);
  CHECK(half_bits_from_float(65520.0f) == 0x7C00);       // halfway to 65536: to even, infinity
  CHECK(half_bits_from_float(1.0f + 1.0f / 2048) == 0x3C00);  // a tie: to even
  CHECK(half_bits_from_float(1.0f + 3.0f / 2048) == 0x3C02);
  CHECK(half_bits_from_float(std::ldexp(1.0f, -25)) == 0x0000);   // half the smallest subnormal: to even, 0
  CHECK(half_bits_from_float(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(half_bits_from_float(-0.0f) == 0x8000);
  // The fixture's values, rounded by numpy: the same halves.
  const Tensor source = kFixtures.get("source"), want = kFixtures.get("f16.values");
  const std::vector<float> s = source.to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < s.size(); ++i) REQUIRE(float_from_half_bits(half_bits_from_float(s[i])) == w[i]);
}

TEST_CASE("gguf: gguf-py's file reads with every metadata type") {
  const GGUFFile f = read_gguf(fixture_path("gguf_small.gguf"));
  CHECK(f.version == 3);
  CHECK(f.alignment == 32);
  CHECK(f.data_offset % 32 == 0);
  CHECK(f.metadata.front().first == "general.architecture");
  CHECK(f.at("general.architecture").as_string("a") == "llama");
  CHECK(f.at("test.u8").type == GGUFValueType::UInt8);
  CHECK(f.at("test.u8").as_int("k") == 200);
  CHECK(f.at("test.i8").as_int("k") == -100);
  CHECK(f.at("test.u16").as_int("k") == 60000);
  CHECK(f.at("test.i16").as_int("k") == -30000);
  CHECK(f.at("test.u32").as_int("k") == 4000000000);
  CHECK(f.at("test.i32").as_int("k") == -2000000000);
  CHECK(f.at("test.u64").uinteger == 18000000000000000000ull);
  CHECK(f.at("test.i64").as_int("k") == -9000000000000000000ll);
  CHECK(f.at("test.f32").as_float("k") == static_cast<double>(0.1f));
  CHECK(f.at("test.f64").as_float("k") == 0.1);
  CHECK(f.at("test.bool").as_bool("k"));
  CHECK(f.at("test.string").as_string("k") == "h\xc3\xa9llo, w\xc3\xb6rld");
  CHECK(f.at("test.ints").as_ints("k") == std::vector<int64_t>{1, -2, 3});
  CHECK(f.at("test.strings").as_strings("k") == std::vector<std::string>{"a", "", "\xc3\xbc"});
  CHECK(f.at("test.floats").as_floats("k") == std::vector<double>{0.5, -1.25});
  const GGUFValue& nested = f.at("test.nested");
  REQUIRE(nested.element_type == GGUFValueType::Array);
  REQUIRE(nested.items.size() == 2);
  CHECK(nested.items[0].as_ints("k") == std::vector<int64_t>{1, 2});
  CHECK(nested.items[1].as_ints("k") == std::vector<int64_t>{3});
  // Typed reads name the key and what it holds.
  CHECK_ERROR_STARTS("[gguf]", f.at("test.string").as_int("test.string"), "test.string is a string, expected an integer");
  CHECK_ERROR_STARTS("[gguf]", f.at("test.ints").as_strings("test.ints"), "an array of strings");
  CHECK_ERROR_STARTS("[gguf]", f.at("nope"), "no metadata key nope");
  CHECK_ERROR_STARTS("[gguf]", f.tensor("nope"), "no tensor named nope");
  CHECK_ERROR_STARTS("[gguf]", f.at("test.u64").as_int("test.u64"), "does not fit in an int64");
}

TEST_CASE("gguf: each type's tensor dequantises to gguf-py's values, and quantises to its bytes") {
  const GGUFFile f = read_gguf(fixture_path("gguf_small.gguf"));
  const Tensor source = kFixtures.get("source");
  REQUIRE(f.tensors.size() == kTypes.size() + kReadOnly.size());
  for (const auto& entry : kTypes) {  // not a structured binding: CAPTURE's lambda takes it
    const std::string& name = entry.first;
    const GGMLType type = entry.second;
    CAPTURE(name);
    const GGUFTensorInfo& t = f.tensor(name);
    CHECK(t.type == type);
    CHECK(t.ne == std::vector<int64_t>{64, 4});
    CHECK(t.shape() == Shape{4, 64});
    CHECK(t.nbytes == static_cast<uint64_t>(256 / ggml_type_info(type).block_values * ggml_type_info(type).block_bytes));
    CHECK(same_bits(f.to_float(t), kFixtures.get(name + ".values")));
    std::string mine(static_cast<size_t>(t.nbytes), '\0');
    quantize_row(type, source.data<float>(), reinterpret_cast<uint8_t*>(mine.data()), 256);
    CHECK(mine == bytes_of(f, t));
    CHECK(gguf_tensor(name, source, type).bytes == bytes_of(f, t));
  }
  CHECK(std::string(ggml_type_name(13)) == "q5_k");
  CHECK(std::string(ggml_type_name(1000)) == "type 1000");
  CHECK_ERROR_STARTS("[gguf]", gguf_tensor("x", randn({2, 33}), GGMLType::Q8_0), "tensor x of shape (2, 33)",
                     "multiple of 32");
  std::vector<float> row(40);
  std::vector<uint8_t> blocks(64);
  CHECK_ERROR_STARTS("[quantize]", quantize_row(GGMLType::Q4_0, row.data(), blocks.data(), 40), "q4_0", "blocks of 32",
                     "a row of 40");
}

TEST_CASE("gguf: q5 and K-quant blocks dequantise to gguf-py's values; a product over them is the float one") {
  const GGUFFile f = read_gguf(fixture_path("gguf_small.gguf"));
  for (const auto& entry : kReadOnly) {
    const std::string& name = entry.first;
    const GGMLType type = entry.second;
    CAPTURE(name);
    const GGUFTensorInfo& t = f.tensor(name);
    CHECK(t.type == type);
    CHECK(t.ne == std::vector<int64_t>{512, 2});
    const GGMLTypeInfo& info = ggml_type_info(type);
    CHECK(t.nbytes == static_cast<uint64_t>(1024 / info.block_values * info.block_bytes));
    const Tensor values = f.to_float(t);
    CHECK(same_bits(values, kFixtures.get(name + ".values")));
    // Weights in these blocks multiply as their dequantised values do.
    const QuantizedMatrix q{type, 2, 512, f.data(t), nullptr};
    const Tensor x = randn({3, 512});
    testing::check_matches("quantized_linear", quantized_linear(x, q), matmul(x, values.t()), {1e-5, 1e-5});
    std::vector<float> row(256);
    std::vector<uint8_t> blocks(static_cast<size_t>(256 / info.block_values * info.block_bytes));
    CHECK_ERROR_STARTS("[quantize]", quantize_row(type, row.data(), blocks.data(), 256), name.c_str(), "is read, not written");
    CHECK_ERROR_STARTS("[dequantize]", dequantize_row(type, blocks.data(), row.data(), 100), name.c_str(), "blocks of");
  }
}

TEST_CASE("gguf: the writer lays out gguf-py's bytes; files it writes read back") {
  const std::string original = file_bytes(fixture_path("gguf_small.gguf"));
  const GGUFFile f = parse_gguf(original, "gguf_small");
  std::vector<GGUFTensorData> tensors;
  for (const GGUFTensorInfo& t : f.tensors) tensors.push_back({t.name, t.type, t.ne, bytes_of(f, t)});
  CHECK(serialize_gguf(f.metadata, tensors) == original);

  // Another alignment: written as general.alignment, honoured when read.
  const testing::ScratchDir dir("gguf");
  const std::string path = dir / "model.gguf";
  const Tensor w = randn({3, 64});
  write_gguf(path, {{"general.architecture", GGUFValue::str("llama")}}, {gguf_tensor("w", w, GGMLType::Q8_0),
              gguf_tensor("v", w, GGMLType::F32)}, 64);
  const GGUFFile back = read_gguf(path);
  CHECK(back.alignment == 64);
  CHECK(back.at("general.alignment").as_int("a") == 64);
  CHECK(back.tensor("v").offset % 64 == 0);
  CHECK(equal(back.to_float(back.tensor("v")), w));
  // Q8_0 keeps each value within half a step d = max|x| / 127 of its block, and the
  // rounding of d to float16 (a relative 2^-11, times at most 127 steps).
  const Tensor q = back.to_float(back.tensor("w"));
  const Tensor step = div(amax(abs(w.reshape({6, 32})), {1}, true), 127.0);
  CHECK(le(abs(sub(q, w)).reshape({6, 32}), add(mul(step, 0.5 + 127.0 / 2048), 1e-6)).all().item<bool>());
  CHECK_ERROR_STARTS("[gguf]", serialize_gguf({}, {}, 48), "power of two");
  CHECK_ERROR_STARTS("[gguf]", serialize_gguf({}, {{"t", GGMLType::Q4_0, {32}, std::string(17, 'x')}}), "17 bytes");
  CHECK_ERROR_STARTS("[gguf]", read_gguf(dir / "missing.gguf"), "cannot open");
}

TEST_CASE("gguf: bad files are refused with the field and its offset") {
  const std::string good = file_bytes(fixture_path("gguf_small.gguf"));
  // Every truncation: an error, never a crash or a read past the end.
  for (size_t n = 0; n < good.size(); ++n) {
    const std::string msg = testing::error_of([&] { static_cast<void>(parse_gguf(good.substr(0, n), "cut")); });
    if (msg.empty()) {
      // A cut inside the last tensor's trailing padding still holds every byte of data.
      const GGUFFile f = parse_gguf(good.substr(0, n), "cut");
      uint64_t end = 0;
      for (const GGUFTensorInfo& t : f.tensors) end = std::max(end, f.data_offset + t.offset + t.nbytes);
      CHECK_MESSAGE(end <= n, "a file cut at ", n, " was read");
      continue;
    }
    CHECK_MESSAGE(msg.rfind("[gguf] cut: ", 0) == 0, msg);
  }
  // Every single-byte change: read, or refused with Kiln's error.
  for (size_t i = 0; i < good.size(); i += 3) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5A);
    try {
      const GGUFFile f = parse_gguf(bad, "flipped");
      for (const GGUFTensorInfo& t : f.tensors) static_cast<void>(f.to_float(t));
    } catch (const Error&) {
    }
  }
  auto with = [&](size_t at, const std::string& bytes) {
    std::string b = good;
    b.replace(at, bytes.size(), bytes);
    return b;
  };
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [](uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };
  CHECK_ERROR_STARTS("[gguf] x: magic at offset 0", parse_gguf(with(0, "GGML"), "x"), "not a GGUF file");
  CHECK_ERROR_STARTS("[gguf] x: version at offset 4", parse_gguf(with(4, u32(1)), "x"), "version 1");
  CHECK_ERROR_STARTS("[gguf] x: tensor_count at offset 8", parse_gguf(with(8, u64(uint64_t{1} << 60)), "x"),
                     "do not fit");
  CHECK_ERROR_STARTS("[gguf] x: metadata_kv_count at offset 16", parse_gguf(with(16, u64(~uint64_t{0})), "x"),
                     "do not fit");
  // The first key's length, then its value type.
  CHECK_ERROR_STARTS("[gguf] x: metadata key 0 at offset 24", parse_gguf(with(24, u64(1000000)), "x"),
                     "a string of 1000000 bytes");
  const size_t type_at = 24 + 8 + std::string("general.architecture").size();
  CHECK_ERROR_STARTS("[gguf] x: general.architecture value type at offset " + std::to_string(type_at),
                     parse_gguf(with(type_at, u32(13)), "x"), "unknown value type 13");
  // A tensor of a type Kiln does not read, dims past 4, an offset out of line.
  const GGUFFile f = parse_gguf(good, "x");
  const size_t info = good.find(std::string("\x03\0\0\0\0\0\0\0f32", 11));
  REQUIRE(info != std::string::npos);
  const size_t dims_at = info + 11, type_field = dims_at + 4 + 16, offset_field = type_field + 4;
  CHECK_ERROR_STARTS("[gguf] x: tensor f32 at offset " + std::to_string(type_field), parse_gguf(with(type_field, u32(11)), "x"),
                     "ggml type q3_k is not one Kiln reads");
  CHECK_ERROR_STARTS("[gguf] x: tensor f32", parse_gguf(with(type_field, u32(12)), "x"),
                     "innermost dim 64 is not a multiple of q4_k's block of 256");
  CHECK_ERROR_STARTS("[gguf] x: tensor f32", parse_gguf(with(dims_at, u32(7)), "x"), "7 dims");
  CHECK_ERROR_STARTS("[gguf] x: tensor f32", parse_gguf(with(offset_field, u64(8)), "x"),
                     "not a multiple of the alignment 32");
  CHECK_ERROR_STARTS("[gguf] x: tensor f32", parse_gguf(with(offset_field, u64(1 << 20)), "x"), "past the end");
  CHECK_ERROR_STARTS("[gguf] x: tensor f16", parse_gguf(with(offset_field + 8 + 11 + 4 + 16 + 4, u64(0)), "x"),
                     "overlaps tensor f32");
  CHECK_ERROR_STARTS("[gguf] x: tensor f32", parse_gguf(with(dims_at + 12, u64(uint64_t{1} << 40)), "x"),
                     "past the end");
  CHECK(f.tensors.front().name == "f32");
}

TEST_CASE("gguf: SmolLM2-135M's file reads as gguf-py reads it") {
  const std::string dir = testing::pretrained_dir("smollm2-135m");
  if (dir.empty()) return;
  const GGUFFile f = read_gguf(dir + "/SmolLM2-135M-Instruct.Q4_1.gguf");
  CHECK(f.version == 3);
  CHECK(f.metadata.size() == 33);
  CHECK(f.at("general.architecture").as_string("a") == "llama");
  CHECK(f.at("llama.block_count").as_int("k") == 30);
  CHECK(f.at("llama.embedding_length").as_int("k") == 576);
  CHECK(f.at("llama.feed_forward_length").as_int("k") == 1536);
  CHECK(f.at("llama.attention.head_count").as_int("k") == 9);
  CHECK(f.at("llama.attention.head_count_kv").as_int("k") == 3);
  CHECK(f.at("llama.rope.freq_base").as_float("k") == 100000.0);
  CHECK(f.at("tokenizer.ggml.pre").as_string("k") == "smollm");
  CHECK(f.at("tokenizer.ggml.tokens").as_strings("k").size() == 49152);
  CHECK(f.at("tokenizer.ggml.merges").as_strings("k").size() == 48900);
  std::map<GGMLType, int> types;
  for (const GGUFTensorInfo& t : f.tensors) ++types[t.type];
  CHECK(f.tensors.size() == 272);
  CHECK(types[GGMLType::Q4_1] == 210);
  CHECK(types[GGMLType::F32] == 61);
  CHECK(types[GGMLType::Q8_0] == 1);
  CHECK(f.tensor("token_embd.weight").shape() == Shape{49152, 576});
  for (const char* name : {"token_embd.weight", "blk.0.ffn_down.weight", "blk.0.attn_norm.weight"}) {
    CAPTURE(name);
    const Tensor want = kFixtures.get(std::string("smollm2.") + name);
    const GGUFTensorInfo& t = f.tensor(name);
    GGUFTensorInfo rows = t;  // the fixture's first rows
    rows.ne.back() = want.dim() == 1 ? rows.ne.back() : want.size(0);
    CHECK(same_bits(f.to_float(rows), want));
  }
}
