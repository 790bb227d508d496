#pragma once
// The safetensors format: an 8-byte little-endian header size N, N bytes of JSON
// ({"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, …,
// "__metadata__": {"key": "value"}}), then the raw little-endian data, offsets relative
// to the end of the header. Files written by Python's safetensors load here and the
// other way round.
#include <map>
#include <string>

#include "../core/tensor.h"

namespace kiln::io {

using TensorMap = std::map<std::string, Tensor>;
using Metadata = std::map<std::string, std::string>;

// Writes atomically: a temporary file beside `path`, flushed, then renamed over it, so a
// crash mid-write never leaves a broken file where a good one was. Tensors are laid out
// as the reference implementation does (by dtype, I64/F64 then F32 then BOOL, then by
// name), so every tensor's data is aligned to its element size and, for the same tensors
// and metadata, the bytes are those Python's safetensors writes.
void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata = {});

struct SafetensorsContents {
  TensorMap tensors;  // CPU tensors
  Metadata metadata;
};

// Checks everything before returning: header size and data offsets inside the file,
// known dtypes (F32, F64, I64, BOOL, BF16; also I32, I16, I8, U8, F16, converted to
// int64 / float32), shapes matching byte counts, data that neither overlaps, leaves
// holes nor runs past the end. Throws "[safetensors] <path>: …" on anything wrong.
SafetensorsContents load_safetensors(const std::string& path);

// The "__metadata__" of a file alone, read from its header (not the tensors: a look at a
// large checkpoint's metadata costs only its header). Throws as load_safetensors for a
// header that is not one.
Metadata load_safetensors_metadata(const std::string& path);

// The same, from bytes in memory (what load_safetensors reads from the file).
SafetensorsContents parse_safetensors(const std::string& bytes, const std::string& source = "<memory>");
std::string serialize_safetensors(const TensorMap& tensors, const Metadata& metadata = {});

// Writes bytes to path atomically: a temporary file in the same directory (named by
// atomic_temp_path), flushed to disk, then renamed over path.
void write_file_atomic(const std::string& path, const std::string& bytes);

// The temporary file write_file_atomic(path, ...) writes before its rename,
// "<path>.tmp.<pid>.<n>": unique per process and call. A crash between the write and
// the rename leaves one behind; the next write_file_atomic of the same path removes it
// (is_orphaned_atomic_temp_of), and so does train::CheckpointManager on start-up.
std::string atomic_temp_path(const std::string& path);
// Whether the file name `name` is such a temporary of the file name `target` (names
// without directories: "best.safetensors.tmp.4242.0" of "best.safetensors").
bool is_atomic_temp_of(const std::string& name, const std::string& target);
// Such a temporary whose writing process is gone (kill(pid, 0) fails with ESRCH): an
// interrupted save's leftover. A live process's temporary is a save in progress.
bool is_orphaned_atomic_temp_of(const std::string& name, const std::string& target);

}  // namespace kiln::io
