#pragma once
// GGUF, the file format of llama.cpp and ggml (versions 2 and 3), little-endian:
//   "GGUF", u32 version, u64 tensor_count, u64 metadata_kv_count,
//   metadata: key (u64 length + UTF-8 bytes), u32 value type, value (an array: u32
//     element type, u64 count, the elements),
//   tensor infos: name, u32 n_dims (<= 4), u64 ne[n_dims] (ne[0] the innermost dim),
//     u32 ggml type, u64 offset of its data from the data section,
//   padding to general.alignment (u32, default 32), the data section: each tensor at an
//   aligned offset, in its ggml type's layout (backend/quant_blocks.h).
// The reader maps the file and keeps the tensors' bytes where they are; the writer lays a
// file out as gguf-py's GGUFWriter does.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../backend/quant_blocks.h"
#include "../core/tensor.h"

namespace kiln::io {

enum class GGUFValueType : uint32_t {
  UInt8 = 0, Int8 = 1, UInt16 = 2, Int16 = 3, UInt32 = 4, Int32 = 5, Float32 = 6, Bool = 7,
  String = 8, Array = 9, UInt64 = 10, Int64 = 11, Float64 = 12,
};
const char* gguf_value_type_name(GGUFValueType t);  // "uint32", "array", ...

// One metadata value. Integers are kept in `integer` (uint64 values above INT64_MAX in
// `uinteger` too), floats in `real`; an array's elements in `items`, all of element_type.
struct GGUFValue {
  GGUFValueType type = GGUFValueType::UInt32;
  GGUFValueType element_type = GGUFValueType::UInt8;  // Array only
  int64_t integer = 0;
  uint64_t uinteger = 0;
  double real = 0;
  bool boolean = false;
  std::string string;
  std::vector<GGUFValue> items;

  static GGUFValue u32(uint32_t v);
  static GGUFValue i32(int32_t v);
  static GGUFValue u64(uint64_t v);
  static GGUFValue f32(float v);
  static GGUFValue flag(bool v);
  static GGUFValue str(std::string v);
  static GGUFValue strings(const std::vector<std::string>& v);
  static GGUFValue array(GGUFValueType element_type, std::vector<GGUFValue> items);

  // Typed reads; `key` names the value in the error: "[gguf] llama.block_count is a
  // string, expected an integer".
  int64_t as_int(const std::string& key) const;
  double as_float(const std::string& key) const;  // any integer or float type
  bool as_bool(const std::string& key) const;
  const std::string& as_string(const std::string& key) const;
  std::vector<std::string> as_strings(const std::string& key) const;
  std::vector<int64_t> as_ints(const std::string& key) const;
  std::vector<double> as_floats(const std::string& key) const;
};

using GGUFMetadata = std::vector<std::pair<std::string, GGUFValue>>;  // in file order

struct GGUFTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml's order: ne[0] innermost
  GGMLType type = GGMLType::F32;
  uint64_t offset = 0;      // from the start of the data section
  uint64_t nbytes = 0;
  Shape shape() const;      // PyTorch's order: ne reversed
  int64_t numel() const;
};

class GGUFFile {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // where the data section starts in the file
  std::string source;        // the path, or what parse_gguf was told
  GGUFMetadata metadata;
  std::vector<GGUFTensorInfo> tensors;

  const GGUFValue* find(const std::string& key) const;
  // Throws "[gguf] <source>: no metadata key llama.block_count".
  const GGUFValue& at(const std::string& key) const;
  const GGUFTensorInfo* find_tensor(const std::string& name) const;
  const GGUFTensorInfo& tensor(const std::string& name) const;  // throws naming it
  // The tensor's bytes as stored (valid while this file, or a copy of it, lives).
  const uint8_t* data(const GGUFTensorInfo& t) const;
  // The tensor as float32 of shape t.shape(), dequantised exactly (quant_blocks.h).
  Tensor to_float(const GGUFTensorInfo& t) const;
  // The bytes the file lives in (kept alive by whoever holds this handle).
  std::shared_ptr<const void> keep_alive() const { return bytes_; }

 private:
  friend GGUFFile parse_gguf_bytes(std::shared_ptr<const void> owner, const uint8_t* bytes, uint64_t size,
                                   const std::string& source);
  std::shared_ptr<const void> bytes_;
  const uint8_t* base_ = nullptr;
};

// Reads a file, memory-mapped. Checks everything before returning: the magic and version,
// every length and count against the bytes left, value and ggml types, dims (positive,
// at most 4, whole blocks), alignment, every tensor's data aligned, inside the file and
// apart from the others; names and keys unique. Throws "[gguf] <path>: <field> at offset
// N: …" on anything wrong.
GGUFFile read_gguf(const std::string& path);
// The same from bytes in memory (copied).
GGUFFile parse_gguf(const std::string& bytes, const std::string& source = "<memory>");

// A tensor to write: its bytes already in `type`'s layout.
struct GGUFTensorData {
  std::string name;
  GGMLType type = GGMLType::F32;
  std::vector<int64_t> ne;  // ggml's order
  std::string bytes;
};
// t (any float dtype, any shape, its last dim a multiple of the type's block) stored as
// `type`: F32, F16 and BF16 converted, Q8_0, Q4_0 and Q4_1 quantised row by row.
GGUFTensorData gguf_tensor(const std::string& name, const Tensor& t, GGMLType type);

// The file's bytes: version 3, the metadata in the given order, the tensors in the given
// order, each at the next multiple of `alignment` (general.alignment is written when it
// is not 32).
std::string serialize_gguf(const GGUFMetadata& metadata, const std::vector<GGUFTensorData>& tensors,
                           uint64_t alignment = 32);
// Writes them atomically (io::write_file_atomic).
void write_gguf(const std::string& path, const GGUFMetadata& metadata, const std::vector<GGUFTensorData>& tensors,
                uint64_t alignment = 32);

}  // namespace kiln::io
