// GGUF reading (checked field by field, the file memory-mapped) and writing (gguf.h).
#include "io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>

#include "io/safetensors.h"
#include "ops/ops.h"

namespace kiln::io {
namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;         // ggml's GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;   // arrays of arrays: deeper is refused, not recursed into
constexpr int64_t kMaxElements = int64_t{1} << 56;

// The bytes of one element of a fixed-size value type (0 for string and array).
uint64_t fixed_size(GGUFValueType t) {
  switch (t) {
    case GGUFValueType::UInt8: case GGUFValueType::Int8: case GGUFValueType::Bool: return 1;
    case GGUFValueType::UInt16: case GGUFValueType::Int16: return 2;
    case GGUFValueType::UInt32: case GGUFValueType::Int32: case GGUFValueType::Float32: return 4;
    case GGUFValueType::UInt64: case GGUFValueType::Int64: case GGUFValueType::Float64: return 8;
    case GGUFValueType::String: case GGUFValueType::Array: return 0;
  }
  return 0;
}

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GGUFValueType::Float64); }

// Reads little-endian fields from the file's bytes; each read names its field, and a read
// past the end, or any check that fails, throws "[gguf] <source>: <field> at offset N: …".
class Cursor {
 public:
  Cursor(const uint8_t* bytes, uint64_t size, const std::string& source) : p_(bytes), size_(size), source_(source) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  template <class... Args>
  [[noreturn]] void fail(const std::string& field, uint64_t at, Args&&... what) const {
    std::ostringstream os;
    os << source_ << ": " << field << " at offset " << at << ": ";
    (os << ... << what);
    KILN_FAIL("gguf", os.str());
  }

  void need(uint64_t n, const std::string& field) const {
    if (n > left()) fail(field, pos_, "needs ", n, " bytes, the file has ", left(), " left");
  }
  template <class T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string string(const std::string& field) {
    const uint64_t at = pos_;
    const uint64_t n = read<uint64_t>(field + " length");
    if (n > left()) fail(field, at, "a string of ", n, " bytes, the file has ", left(), " left");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& source_;
};

GGUFValue of_type(GGUFValueType type) {
  GGUFValue v;
  v.type = type;
  return v;
}

// A uint64 value: itself in uinteger, clamped to INT64_MAX in integer.
void set_uint64(GGUFValue& v, uint64_t u) {
  v.uinteger = u;
  v.integer = static_cast<int64_t>(std::min<uint64_t>(u, std::numeric_limits<int64_t>::max()));
}

GGUFValue read_value(Cursor& c, GGUFValueType type, const std::string& field, int depth) {
  GGUFValue v = of_type(type);
  switch (type) {
    case GGUFValueType::UInt8: v.integer = c.read<uint8_t>(field); break;
    case GGUFValueType::Int8: v.integer = c.read<int8_t>(field); break;
    case GGUFValueType::UInt16: v.integer = c.read<uint16_t>(field); break;
    case GGUFValueType::Int16: v.integer = c.read<int16_t>(field); break;
    case GGUFValueType::UInt32: v.integer = c.read<uint32_t>(field); break;
    case GGUFValueType::Int32: v.integer = c.read<int32_t>(field); break;
    case GGUFValueType::UInt64: set_uint64(v, c.read<uint64_t>(field)); break;
    case GGUFValueType::Int64: v.integer = c.read<int64_t>(field); break;
    case GGUFValueType::Float32: v.real = c.read<float>(field); break;
    case GGUFValueType::Float64: v.real = c.read<double>(field); break;
    case GGUFValueType::Bool: {
      const uint64_t at = c.pos();
      const uint8_t b = c.read<uint8_t>(field);
      if (b > 1) c.fail(field, at, "a bool must be 0 or 1, got ", static_cast<int>(b));
      v.boolean = b == 1;
      break;
    }
    case GGUFValueType::String: v.string = c.string(field); break;
    case GGUFValueType::Array: {
      const uint64_t at = c.pos();
      const uint32_t et = c.read<uint32_t>(field + " element type");
      if (!known_value_type(et)) c.fail(field, at, "unknown array element type ", et);
      v.element_type = static_cast<GGUFValueType>(et);
      if (v.element_type == GGUFValueType::Array && depth + 1 >= kMaxArrayDepth)
        c.fail(field, at, "arrays nested more than ", kMaxArrayDepth, " deep");
      const uint64_t count_at = c.pos();
      const uint64_t count = c.read<uint64_t>(field + " count");
      // Each element takes at least this many bytes: a count the bytes left cannot hold is
      // refused before anything is allocated for it.
      const uint64_t least = v.element_type == GGUFValueType::String ? 8
                             : v.element_type == GGUFValueType::Array ? 12
                                                                      : fixed_size(v.element_type);
      if (count > c.left() / least)
        c.fail(field, count_at, "an array of ", count, " ", gguf_value_type_name(v.element_type),
               " elements does not fit in the ", c.left(), " bytes left");
      v.items.reserve(static_cast<size_t>(count));
      for (uint64_t i = 0; i < count; ++i) v.items.push_back(read_value(c, v.element_type, field, depth + 1));
      break;
    }
  }
  return v;
}

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

// The tensor's bytes from its dims and type; throws through c on dims that do not fit.
uint64_t tensor_bytes(Cursor& c, const std::string& field, uint64_t at, const std::vector<int64_t>& ne,
                      const GGMLTypeInfo& info) {
  // The product of the non-zero dims is bounded too: a tensor with a zero dim still needs
  // a shape whose other sizes multiply without overflow.
  int64_t numel = 1, nonzero = 1;
  for (int64_t d : ne) {
    if (d < 0) c.fail(field, at, "a negative dim ", d);
    if (d != 0 && nonzero > kMaxElements / d) c.fail(field, at, "dims whose product passes 2^56 elements");
    if (d != 0) nonzero *= d;
    numel *= d;
  }
  if (ne.empty() && info.block_values > 1)
    c.fail(field, at, "a 0-dim tensor (one value) cannot be stored in ", info.name, "'s blocks of ", info.block_values);
  if (!ne.empty() && ne[0] % info.block_values != 0)
    c.fail(field, at, "its innermost dim ", ne[0], " is not a multiple of ", info.name, "'s block of ",
           info.block_values);
  return static_cast<uint64_t>(numel / info.block_values * info.block_bytes);
}

// A value's type as text for errors: "[gguf] k is a string, expected an integer".
[[noreturn]] void wrong_type(const std::string& key, const GGUFValue& v, const char* expected) {
  KILN_FAIL("gguf", key, " is ", v.type == GGUFValueType::Array ? "an array" : "a ", gguf_value_type_name(v.type),
            ", expected ", expected);
}

bool is_integer(GGUFValueType t) {
  return t == GGUFValueType::UInt8 || t == GGUFValueType::Int8 || t == GGUFValueType::UInt16 ||
         t == GGUFValueType::Int16 || t == GGUFValueType::UInt32 || t == GGUFValueType::Int32 ||
         t == GGUFValueType::UInt64 || t == GGUFValueType::Int64;
}

// ---- writing

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

void put_value(std::string& out, const GGUFValue& v, bool with_type) {
  if (with_type) put<uint32_t>(out, static_cast<uint32_t>(v.type));
  switch (v.type) {
    case GGUFValueType::UInt8: put(out, static_cast<uint8_t>(v.integer)); break;
    case GGUFValueType::Int8: put(out, static_cast<int8_t>(v.integer)); break;
    case GGUFValueType::UInt16: put(out, static_cast<uint16_t>(v.integer)); break;
    case GGUFValueType::Int16: put(out, static_cast<int16_t>(v.integer)); break;
    case GGUFValueType::UInt32: put(out, static_cast<uint32_t>(v.integer)); break;
    case GGUFValueType::Int32: put(out, static_cast<int32_t>(v.integer)); break;
    case GGUFValueType::UInt64: put(out, v.uinteger > 0 ? v.uinteger : static_cast<uint64_t>(v.integer)); break;
    case GGUFValueType::Int64: put(out, v.integer); break;
    case GGUFValueType::Float32: put(out, static_cast<float>(v.real)); break;
    case GGUFValueType::Float64: put(out, v.real); break;
    case GGUFValueType::Bool: put<uint8_t>(out, v.boolean ? 1 : 0); break;
    case GGUFValueType::String: put_string(out, v.string); break;
    case GGUFValueType::Array:
      put<uint32_t>(out, static_cast<uint32_t>(v.element_type));
      put<uint64_t>(out, v.items.size());
      for (const GGUFValue& item : v.items) {
        KILN_CHECK(item.type == v.element_type, "gguf", "an array of ", gguf_value_type_name(v.element_type),
                   " holds a ", gguf_value_type_name(item.type));
        put_value(out, item, false);
      }
      break;
  }
}

}  // namespace

const char* gguf_value_type_name(GGUFValueType t) {
  static const char* const kNames[] = {"uint8", "int8",  "uint16", "int16",  "uint32", "int32", "float32",
                                       "bool",  "string", "array", "uint64", "int64",  "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "unknown";
}

GGUFValue GGUFValue::u32(uint32_t v) {
  GGUFValue r = of_type(GGUFValueType::UInt32);
  r.integer = v;
  return r;
}
GGUFValue GGUFValue::i32(int32_t v) {
  GGUFValue r = of_type(GGUFValueType::Int32);
  r.integer = v;
  return r;
}
GGUFValue GGUFValue::u64(uint64_t v) {
  GGUFValue r = of_type(GGUFValueType::UInt64);
  set_uint64(r, v);
  return r;
}
GGUFValue GGUFValue::f32(float v) {
  GGUFValue r = of_type(GGUFValueType::Float32);
  r.real = v;
  return r;
}
GGUFValue GGUFValue::flag(bool v) {
  GGUFValue r = of_type(GGUFValueType::Bool);
  r.boolean = v;
  return r;
}
GGUFValue GGUFValue::str(std::string v) {
  GGUFValue r = of_type(GGUFValueType::String);
  r.string = std::move(v);
  return r;
}
GGUFValue GGUFValue::strings(const std::vector<std::string>& v) {
  std::vector<GGUFValue> items;
  items.reserve(v.size());
  for (const std::string& s : v) items.push_back(str(s));
  return array(GGUFValueType::String, std::move(items));
}
GGUFValue GGUFValue::array(GGUFValueType element_type, std::vector<GGUFValue> items) {
  GGUFValue r;
  r.type = GGUFValueType::Array;
  r.element_type = element_type;
  r.items = std::move(items);
  return r;
}

int64_t GGUFValue::as_int(const std::string& key) const {
  if (!is_integer(type)) wrong_type(key, *this, "an integer");
  KILN_CHECK(type != GGUFValueType::UInt64 || uinteger <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
             "gguf", key, " = ", uinteger, " does not fit in an int64");
  return integer;
}
double GGUFValue::as_float(const std::string& key) const {
  if (type == GGUFValueType::Float32 || type == GGUFValueType::Float64) return real;
  if (is_integer(type)) return static_cast<double>(type == GGUFValueType::UInt64 ? uinteger : integer);
  wrong_type(key, *this, "a number");
}
bool GGUFValue::as_bool(const std::string& key) const {
  if (type != GGUFValueType::Bool) wrong_type(key, *this, "a bool");
  return boolean;
}
const std::string& GGUFValue::as_string(const std::string& key) const {
  if (type != GGUFValueType::String) wrong_type(key, *this, "a string");
  return string;
}
std::vector<std::string> GGUFValue::as_strings(const std::string& key) const {
  if (type != GGUFValueType::Array || element_type != GGUFValueType::String) wrong_type(key, *this, "an array of strings");
  std::vector<std::string> out;
  out.reserve(items.size());
  for (const GGUFValue& v : items) out.push_back(v.string);
  return out;
}
std::vector<int64_t> GGUFValue::as_ints(const std::string& key) const {
  if (type != GGUFValueType::Array || !is_integer(element_type)) wrong_type(key, *this, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(items.size());
  for (const GGUFValue& v : items) out.push_back(v.as_int(key));
  return out;
}
std::vector<double> GGUFValue::as_floats(const std::string& key) const {
  if (type != GGUFValueType::Array) wrong_type(key, *this, "an array of numbers");
  std::vector<double> out;
  out.reserve(items.size());
  for (const GGUFValue& v : items) out.push_back(v.as_float(key));
  return out;
}

Shape GGUFTensorInfo::shape() const { return Shape(ne.rbegin(), ne.rend()); }
int64_t GGUFTensorInfo::numel() const { return std::accumulate(ne.begin(), ne.end(), int64_t{1}, std::multiplies<>()); }

const GGUFValue* GGUFFile::find(const std::string& key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}
const GGUFValue& GGUFFile::at(const std::string& key) const {
  const GGUFValue* v = find(key);
  KILN_CHECK(v != nullptr, "gguf", source, ": no metadata key ", key);
  return *v;
}
const GGUFTensorInfo* GGUFFile::find_tensor(const std::string& name) const {
  for (const GGUFTensorInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}
const GGUFTensorInfo& GGUFFile::tensor(const std::string& name) const {
  const GGUFTensorInfo* t = find_tensor(name);
  KILN_CHECK(t != nullptr, "gguf", source, ": no tensor named ", name);
  return *t;
}
const uint8_t* GGUFFile::data(const GGUFTensorInfo& t) const { return base_ + data_offset + t.offset; }

Tensor GGUFFile::to_float(const GGUFTensorInfo& t) const {
  Tensor out = Tensor::empty(t.shape(), TensorOptions(kFloat32));
  if (t.numel() > 0) dequantize_row(t.type, data(t), out.data<float>(), t.numel());
  return out;
}

GGUFFile parse_gguf_bytes(std::shared_ptr<const void> owner, const uint8_t* bytes, uint64_t size,
                          const std::string& source) {
  GGUFFile f;
  f.source = source;
  f.bytes_ = std::move(owner);
  f.base_ = bytes;
  Cursor c(bytes, size, f.source);
  const uint32_t magic = c.read<uint32_t>("magic");
  if (std::memcmp(&magic, "GGUF", 4) != 0) c.fail("magic", 0, "not a GGUF file (it does not start with \"GGUF\")");
  f.version = c.read<uint32_t>("version");
  if (f.version != 2 && f.version != 3) c.fail("version", 4, "version ", f.version, " (Kiln reads 2 and 3)");
  const uint64_t n_tensors = c.read<uint64_t>("tensor_count");
  const uint64_t n_kv = c.read<uint64_t>("metadata_kv_count");
  // A key takes at least 13 bytes, a tensor info 24: refuse counts the file cannot hold.
  if (n_kv > c.left() / 13) c.fail("metadata_kv_count", 16, n_kv, " entries do not fit in the file");
  if (n_tensors > c.left() / 24) c.fail("tensor_count", 8, n_tensors, " tensors do not fit in the file");

  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = c.pos();
    std::string key = c.string("metadata key " + std::to_string(i));
    if (f.find(key)) c.fail("metadata key " + key, at, "the key appears twice");
    const uint64_t type_at = c.pos();
    const uint32_t type = c.read<uint32_t>(key + " value type");
    if (!known_value_type(type)) c.fail(key + " value type", type_at, "unknown value type ", type);
    GGUFValue v = read_value(c, static_cast<GGUFValueType>(type), key, 0);
    f.metadata.emplace_back(std::move(key), std::move(v));
  }
  if (const GGUFValue* a = f.find("general.alignment")) {
    if (a->type != GGUFValueType::UInt32 || a->integer == 0 || (a->integer & (a->integer - 1)) != 0)
      c.fail("general.alignment", 0, "must be a uint32 power of two, got ",
             a->type == GGUFValueType::UInt32 ? std::to_string(a->integer) : gguf_value_type_name(a->type));
    f.alignment = static_cast<uint64_t>(a->integer);
  }

  f.tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = c.pos();
    GGUFTensorInfo t;
    t.name = c.string("tensor " + std::to_string(i) + " name");
    const std::string field = "tensor " + t.name;
    if (f.find_tensor(t.name)) c.fail(field, at, "the name appears twice");
    const uint32_t n_dims = c.read<uint32_t>(field + " n_dims");
    if (n_dims > kMaxDims) c.fail(field, at, n_dims, " dims (at most ", kMaxDims, ")");
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.read<uint64_t>(field + " ne");
      if (ne > static_cast<uint64_t>(kMaxElements)) c.fail(field, at, "a dim of ", ne);
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    const uint64_t type_at = c.pos();
    const uint32_t type = c.read<uint32_t>(field + " type");
    const GGMLTypeInfo* info = ggml_type_info(type);
    if (!info) c.fail(field, type_at, "ggml type ", ggml_type_name(type), " is not one Kiln reads (f32, f16, bf16, q8_0, q4_0, q4_1)");
    t.type = info->type;
    t.offset = c.read<uint64_t>(field + " offset");
    if (t.offset % f.alignment != 0) c.fail(field, at, "data offset ", t.offset, " is not a multiple of the alignment ", f.alignment);
    t.nbytes = tensor_bytes(c, field, at, t.ne, *info);
    f.tensors.push_back(std::move(t));
  }

  f.data_offset = align_up(c.pos(), f.alignment);
  if (f.data_offset > size && !f.tensors.empty())
    c.fail("data section", c.pos(), "starts at ", f.data_offset, ", past the end of the file (", size, " bytes)");
  const uint64_t data_size = size - std::min(size, f.data_offset);
  std::vector<const GGUFTensorInfo*> by_offset;
  for (const GGUFTensorInfo& t : f.tensors) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      c.fail("tensor " + t.name, f.data_offset + std::min(t.offset, data_size), "its ", t.nbytes, " bytes at data offset ",
             t.offset, " run past the end of the file (", data_size, " bytes of data)");
    by_offset.push_back(&t);
  }
  std::stable_sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GGUFTensorInfo& a = *by_offset[i - 1];
    const GGUFTensorInfo& b = *by_offset[i];
    if (a.nbytes > 0 && b.nbytes > 0 && a.offset + a.nbytes > b.offset)
      c.fail("tensor " + b.name, f.data_offset + b.offset, "its data overlaps tensor ", a.name, "'s");
  }
  return f;
}

GGUFFile parse_gguf(const std::string& bytes, const std::string& source) {
  auto copy = std::make_shared<const std::string>(bytes);
  const auto* p = reinterpret_cast<const uint8_t*>(copy->data());
  const uint64_t size = copy->size();
  return parse_gguf_bytes(std::shared_ptr<const void>(copy, copy->data()), p, size, source);
}

GGUFFile read_gguf(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KILN_CHECK(fd >= 0, "gguf", path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    KILN_FAIL("gguf", path, ": not a regular file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return parse_gguf(std::string(), path);  // refused there, as too short
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  KILN_CHECK(map != MAP_FAILED, "gguf", path, ": cannot map ", size, " bytes: ", std::strerror(errno));
  std::shared_ptr<const void> owner(map, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  return parse_gguf_bytes(std::move(owner), static_cast<const uint8_t*>(map), size, path);
}

GGUFTensorData gguf_tensor(const std::string& name, const Tensor& t, GGMLType type) {
  const GGMLTypeInfo& info = ggml_type_info(type);
  KILN_CHECK(t.defined() && t.is_floating_point(), "gguf", "tensor ", name, " must be a float tensor");
  KILN_CHECK(t.dim() >= 1 && t.dim() <= kMaxDims, "gguf", "tensor ", name, " has ", t.dim(), " dims (1 to ",
             kMaxDims, ")");
  KILN_CHECK(t.size(-1) % info.block_values == 0, "gguf", "tensor ", name, " of shape ", shape_str(t.shape()),
             ": ", info.name, " needs a last dim that is a multiple of ", info.block_values);
  GGUFTensorData d;
  d.name = name;
  d.type = type;
  d.ne.assign(t.shape().rbegin(), t.shape().rend());
  const Tensor x = t.detach().to(kCPU).to(kFloat32).contiguous();
  d.bytes.resize(static_cast<size_t>(x.numel() / info.block_values * info.block_bytes));
  if (x.numel() > 0) quantize_row(type, x.data<float>(), reinterpret_cast<uint8_t*>(d.bytes.data()), x.numel());
  return d;
}

std::string serialize_gguf(const GGUFMetadata& metadata, const std::vector<GGUFTensorData>& tensors,
                           uint64_t alignment) {
  KILN_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0 && alignment <= 0xFFFFFFFFu, "gguf",
             "alignment must be a power of two, got ", alignment);
  GGUFMetadata kv = metadata;
  bool has_alignment = false;
  for (const auto& [k, v] : kv) {
    if (k != "general.alignment") continue;
    KILN_CHECK(v.type == GGUFValueType::UInt32 && static_cast<uint64_t>(v.integer) == alignment, "gguf",
               "general.alignment in the metadata must be the uint32 ", alignment);
    has_alignment = true;
  }
  if (!has_alignment && alignment != kDefaultAlignment)
    kv.emplace_back("general.alignment", GGUFValue::u32(static_cast<uint32_t>(alignment)));

  std::string out = "GGUF";
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors.size());
  put<uint64_t>(out, kv.size());
  for (const auto& [k, v] : kv) {
    put_string(out, k);
    put_value(out, v, true);
  }
  uint64_t offset = 0;
  for (const GGUFTensorData& t : tensors) {
    const GGMLTypeInfo& info = ggml_type_info(t.type);
    int64_t numel = 1;
    for (int64_t d : t.ne) numel *= d;
    KILN_CHECK(t.ne.size() <= kMaxDims && (t.ne.empty() || t.ne[0] % info.block_values == 0) &&
                   static_cast<uint64_t>(numel / info.block_values * info.block_bytes) == t.bytes.size(),
               "gguf", "tensor ", t.name, ": ", t.bytes.size(), " bytes do not hold its dims in ", info.name);
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(out, static_cast<uint64_t>(d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += align_up(t.bytes.size(), alignment);
  }
  out.resize(align_up(out.size(), alignment), '\0');
  for (const GGUFTensorData& t : tensors) {
    out += t.bytes;
    out.resize(align_up(out.size(), alignment), '\0');
  }
  return out;
}

void write_gguf(const std::string& path, const GGUFMetadata& metadata, const std::vector<GGUFTensorData>& tensors,
                uint64_t alignment) {
  write_file_atomic(path, serialize_gguf(metadata, tensors, alignment));
}

}  // namespace kiln::io
