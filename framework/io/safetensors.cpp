#include "io/safetensors.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <signal.h>
#include <unistd.h>

#include "autograd/grad_mode.h"
#include "core/float16.h"
#include "io/json.h"
#include "io/read_all.h"
#include "ops/ops.h"

namespace kiln::io {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

struct FileDType {
  const char* name;
  size_t bytes;
  DType kiln;  // what it loads as
};

const FileDType kDTypes[] = {
    {"F32", 4, kFloat32}, {"F64", 8, kFloat64}, {"I64", 8, kInt64}, {"BOOL", 1, kBool},
    {"I32", 4, kInt64},   {"I16", 2, kInt64},   {"I8", 1, kInt64},   {"U8", 1, kInt64},
    {"F16", 2, kFloat32}, {"BF16", 2, kBFloat16},
};

const char* file_dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Int64: return "I64";
    case DType::Bool: return "BOOL";
    case DType::BFloat16: return "BF16";
  }
  return "?";
}

// Decodes n raw elements of file dtype `fd` into the tensor t (contiguous, t's dtype).
void decode(const FileDType& fd, const char* src, int64_t n, const Tensor& t) {
  std::string name = fd.name;
  if (name == "F32" || name == "F64" || name == "I64" || name == "BOOL" || name == "BF16") {
    std::memcpy(t.data_ptr(), src, static_cast<size_t>(n) * fd.bytes);
    if (name == "BOOL") {
      bool* b = t.data<bool>();  // normalise any non-zero byte to true
      const unsigned char* raw = reinterpret_cast<const unsigned char*>(src);
      for (int64_t i = 0; i < n; ++i) b[i] = raw[i] != 0;
    }
    return;
  }
  auto load = [&](auto tag, int64_t i) {
    decltype(tag) v;
    std::memcpy(&v, src + i * sizeof(v), sizeof(v));
    return v;
  };
  if (t.dtype() == kInt64) {
    int64_t* o = t.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (name == "I32") o[i] = load(int32_t{}, i);
      else if (name == "I16") o[i] = load(int16_t{}, i);
      else if (name == "I8") o[i] = load(int8_t{}, i);
      else o[i] = load(uint8_t{}, i);
    }
    return;
  }
  float* o = t.data<float>();  // F16
  for (int64_t i = 0; i < n; ++i) o[i] = float_from_half_bits(load(uint16_t{}, i));
}

struct Entry {
  std::string name;
  const FileDType* dtype;
  Shape shape;
  uint64_t begin, end;
};

}  // namespace

std::string serialize_safetensors(const TensorMap& tensors, const Metadata& metadata) {
  NoGradGuard no_grad;
  std::ostringstream header;
  header << '{';
  bool first = true;
  if (!metadata.empty()) {
    header << "\"__metadata__\":{";
    bool f = true;
    for (const auto& [k, v] : metadata) {
      header << (f ? "" : ",") << json_quote(k) << ':' << json_quote(v);
      f = false;
    }
    header << '}';
    first = false;
  }
  // The reference implementation's order: by dtype (I64, F64, F32, …, BF16, …, BOOL: its
  // Dtype enum, descending) then by name,
  // so that every tensor's data is aligned to its element size (zero-copy readers that
  // map the file need that) and Kiln writes the same bytes as Python's safetensors.
  std::vector<std::pair<std::string, Tensor>> ordered;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(name != "__metadata__", "safetensors", "'__metadata__' is reserved and cannot name a tensor");
    KILN_CHECK(t.defined(), "safetensors", "tensor '", name, "' is undefined");
    ordered.emplace_back(name, t);
  }
  auto rank = [](DType t) {
    switch (t) {
      case DType::Int64: return 0;
      case DType::Float64: return 1;
      case DType::Float32: return 2;
      case DType::BFloat16: return 3;
      case DType::Bool: return 4;
    }
    return 5;
  };
  std::stable_sort(ordered.begin(), ordered.end(),
                   [&](const auto& a, const auto& b) { return rank(a.second.dtype()) < rank(b.second.dtype()); });
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : ordered) {
    Tensor c = t.detach().to(kCPU).contiguous();
    uint64_t bytes = static_cast<uint64_t>(c.numel()) * c.element_size();
    header << (first ? "" : ",") << json_quote(name) << ":{\"dtype\":\"" << file_dtype_name(c.dtype())
           << "\",\"shape\":[";
    for (int64_t d = 0; d < c.dim(); ++d) header << (d ? "," : "") << c.size(d);
    header << "],\"data_offsets\":[" << offset << ',' << offset + bytes << "]}";
    offset += bytes;
    first = false;
    data.push_back(c);
  }
  header << '}';
  std::string h = header.str();
  h.append((8 - h.size() % 8) % 8, ' ');  // pad so the data starts 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  out += h;
  out.reserve(out.size() + offset);
  for (const Tensor& c : data) out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  return out;
}

namespace {

// The "__metadata__" object of a header: string values only.
Metadata metadata_of(const JsonValue& v, const std::string& fail_prefix) {
  KILN_CHECK(v.kind == JsonValue::Kind::Object, "safetensors", fail_prefix, "__metadata__ must be an object");
  Metadata m;
  for (const auto& [k, s] : v.object) {
    KILN_CHECK(s.kind == JsonValue::Kind::String, "safetensors", fail_prefix, "metadata value of '", k,
               "' is not a string");
    m[k] = s.string;
  }
  return m;
}

}  // namespace

SafetensorsContents parse_safetensors(const std::string& bytes, const std::string& source) {
  const std::string op = "safetensors";
  auto fail_prefix = source + ": ";
  KILN_CHECK(bytes.size() >= 8, op.c_str(), fail_prefix, "file is truncated: ", bytes.size(),
             " bytes, too short for the 8-byte header size");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  KILN_CHECK(n <= bytes.size() - 8, op.c_str(), fail_prefix, "header size ", n, " runs past the end of the file (",
             bytes.size(), " bytes)");
  KILN_CHECK(n >= 2, op.c_str(), fail_prefix, "header size ", n, " is too small for a JSON object");
  std::string header_text = bytes.substr(8, n);
  JsonValue root = parse_json(header_text, op.c_str(), fail_prefix);
  KILN_CHECK(root.kind == JsonValue::Kind::Object, op.c_str(), fail_prefix, "header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - n;
  SafetensorsContents out;
  std::vector<Entry> entries;
  for (const auto& [name, v] : root.object) {
    if (name == "__metadata__") {
      out.metadata = metadata_of(v, fail_prefix);
      continue;
    }
    KILN_CHECK(v.kind == JsonValue::Kind::Object, op.c_str(), fail_prefix, "entry '", name, "' is not an object");
    const JsonValue* dt = v.find("dtype");
    const JsonValue* sh = v.find("shape");
    const JsonValue* off = v.find("data_offsets");
    KILN_CHECK(dt && sh && off, op.c_str(), fail_prefix, "entry '", name, "' needs dtype, shape and data_offsets");
    KILN_CHECK(dt->kind == JsonValue::Kind::String, op.c_str(), fail_prefix, "dtype of '", name, "' is not a string");
    Entry e{name, nullptr, {}, 0, 0};
    for (const auto& fd : kDTypes)
      if (dt->string == fd.name) e.dtype = &fd;
    KILN_CHECK(e.dtype, op.c_str(), fail_prefix, "tensor '", name, "' has unknown dtype '", dt->string, "'");
    KILN_CHECK(sh->kind == JsonValue::Kind::Array, op.c_str(), fail_prefix, "shape of '", name, "' is not an array");
    // The product of the dims, counting 0 as 1, stays within 2^62, so that neither the
    // element count nor the strides of even an empty tensor can overflow.
    uint64_t extent = 1;
    bool empty = false;
    for (const auto& d : sh->array) {
      KILN_CHECK(d.kind == JsonValue::Kind::Number && d.is_integer && d.integer >= 0, op.c_str(), fail_prefix,
                 "shape of '", name, "' has an invalid dimension");
      e.shape.push_back(d.integer);
      const uint64_t dim = std::max<uint64_t>(static_cast<uint64_t>(d.integer), 1);
      KILN_CHECK(extent <= (uint64_t(1) << 62) / dim, op.c_str(), fail_prefix, "shape of '", name, "' ",
                 shape_str(e.shape), "… is too large");
      extent *= dim;
      empty = empty || d.integer == 0;
    }
    const uint64_t numel = empty ? 0 : extent;
    KILN_CHECK(off->kind == JsonValue::Kind::Array && off->array.size() == 2 && off->array[0].is_integer &&
                   off->array[1].is_integer && off->array[0].integer >= 0 && off->array[1].integer >= 0,
               op.c_str(), fail_prefix, "data_offsets of '", name, "' must be two non-negative integers");
    e.begin = static_cast<uint64_t>(off->array[0].integer);
    e.end = static_cast<uint64_t>(off->array[1].integer);
    KILN_CHECK(e.begin <= e.end, op.c_str(), fail_prefix, "data_offsets of '", name, "' are out of order: [", e.begin,
               ", ", e.end, "]");
    KILN_CHECK(e.end <= data_size, op.c_str(), fail_prefix, "data_offsets of '", name, "' [", e.begin, ", ", e.end,
               "] run past the end of the data (", data_size, " bytes): the file is truncated or corrupt");
    // numel <= 2^62, so numel * 8 may wrap: a wrapped product must not pass for a match.
    const bool overflow = numel > std::numeric_limits<uint64_t>::max() / e.dtype->bytes;
    KILN_CHECK(!overflow && e.end - e.begin == numel * e.dtype->bytes, op.c_str(), fail_prefix, "tensor '", name,
               "' of shape ", shape_str(e.shape), " and dtype ", e.dtype->name, " needs ",
               overflow ? std::string("more than 2^64") : std::to_string(numel * e.dtype->bytes),
               " bytes but its data_offsets span ", e.end - e.begin);
    entries.push_back(std::move(e));
  }
  // The data must be covered exactly once: sorted by offset, each entry starts where the
  // previous one ended (no overlap, no hole), and the last ends at the end of the file.
  std::vector<const Entry*> sorted;
  for (const auto& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const Entry& e = *sorted[i];
    KILN_CHECK(e.begin >= at, op.c_str(), fail_prefix, "data of '", e.name, "' [", e.begin, ", ", e.end,
               ") overlaps the data of '", sorted[i - 1]->name, "' [", sorted[i - 1]->begin, ", ", sorted[i - 1]->end,
               ")");
    KILN_CHECK(e.begin == at, op.c_str(), fail_prefix, "bytes [", at, ", ", e.begin,
               ") of the data belong to no tensor (a hole before '", e.name, "')");
    at = e.end;
  }
  KILN_CHECK(at == data_size, op.c_str(), fail_prefix, "bytes [", at, ", ", data_size,
             ") at the end of the data belong to no tensor");
  const char* data = bytes.data() + 8 + n;
  for (const auto& e : entries) {
    Tensor t = Tensor::empty(e.shape, TensorOptions(e.dtype->kiln));
    decode(*e.dtype, data + e.begin, t.numel(), t);
    out.tensors[e.name] = t;
  }
  return out;
}

std::string atomic_temp_path(const std::string& path) {
  // Unique per process and per call, so concurrent saves never share a temporary file.
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

bool is_atomic_temp_of(const std::string& name, const std::string& target) {
  const std::string head = target + ".tmp.";
  if (name.size() <= head.size() || name.compare(0, head.size(), head) != 0) return false;
  // The rest is "<digits>.<digits>".
  const std::string rest = name.substr(head.size());
  const size_t dot = rest.find('.');
  auto digits = [](const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
  };
  return dot != std::string::npos && digits(rest.substr(0, dot)) && digits(rest.substr(dot + 1));
}

bool is_orphaned_atomic_temp_of(const std::string& name, const std::string& target) {
  if (!is_atomic_temp_of(name, target)) return false;
  const size_t from = target.size() + 5;  // after "<target>.tmp."
  const std::string digits = name.substr(from, name.find('.', from) - from);
  // More digits than any pid_t holds, or 0: no process can have written it.
  const long pid = digits.size() > 9 ? 0 : std::stol(digits);
  return pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
}

namespace {

// Removes the temporaries of `path` that an interrupted save left (see
// is_orphaned_atomic_temp_of). Best effort: a temporary that cannot be listed or removed
// never makes the save itself fail.
void remove_orphaned_temporaries_of(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string target = p.filename().string();
  if (target.empty()) return;
  std::error_code ec;
  fs::directory_iterator it(p.parent_path().empty() ? fs::path(".") : p.parent_path(), ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!is_orphaned_atomic_temp_of(it->path().filename().string(), target)) continue;
    std::error_code ignored;
    fs::remove(it->path(), ignored);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  remove_orphaned_temporaries_of(path);
  std::string tmp = atomic_temp_path(path);
  {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    KILN_CHECK(f != nullptr, "save", "cannot write '", path, "': opening the temporary file '", tmp,
               "' failed: ", std::strerror(errno));
    bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    ok = std::fflush(f) == 0 && ok;
    ok = ::fsync(::fileno(f)) == 0 && ok;
    ok = std::fclose(f) == 0 && ok;
    if (!ok) {
      int err = errno;
      std::remove(tmp.c_str());
      KILN_FAIL("save", "writing '", tmp, "' failed: ", std::strerror(err));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    KILN_FAIL("save", "cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
}

void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

SafetensorsContents load_safetensors(const std::string& path) {
  std::error_code ec;
  KILN_CHECK(!std::filesystem::is_directory(path, ec), "safetensors", path, ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), "safetensors", path, ": cannot open: ", std::strerror(errno));
  std::string bytes = detail::read_all(in);
  KILN_CHECK(!in.bad(), "safetensors", path, ": reading failed after ", bytes.size(), " bytes");
  return parse_safetensors(bytes, path);
}

Metadata load_safetensors_metadata(const std::string& path) {
  const std::string fail_prefix = path + ": ";
  std::error_code ec;
  KILN_CHECK(!std::filesystem::is_directory(path, ec), "safetensors", path, ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), "safetensors", path, ": cannot open: ", std::strerror(errno));
  const uintmax_t size = std::filesystem::file_size(path, ec);
  KILN_CHECK(!ec, "safetensors", path, ": cannot read its size: ", ec.message());
  uint64_t n = 0;
  KILN_CHECK(size >= 8 && in.read(reinterpret_cast<char*>(&n), 8), "safetensors", fail_prefix,
             "file is truncated: ", size, " bytes, too short for the 8-byte header size");
  KILN_CHECK(n <= size - 8, "safetensors", fail_prefix, "header size ", n, " runs past the end of the file (", size,
             " bytes)");
  KILN_CHECK(n >= 2, "safetensors", fail_prefix, "header size ", n, " is too small for a JSON object");
  std::string header(n, '\0');
  KILN_CHECK(in.read(header.data(), static_cast<std::streamsize>(n)), "safetensors", fail_prefix,
             "reading the header failed");
  JsonValue root = parse_json(header, "safetensors", fail_prefix);
  KILN_CHECK(root.kind == JsonValue::Kind::Object, "safetensors", fail_prefix, "header is not a JSON object");
  const JsonValue* meta = root.find("__metadata__");
  return meta ? metadata_of(*meta, fail_prefix) : Metadata{};
}

}  // namespace kiln::io
