#pragma once
#include <cstdint>
#include <ostream>
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  Device() = default;
  Device(DeviceType t, int i = 0) : type(t), index(i) {}
  // "cpu", "cuda", "cuda:1"; throws "[device] unknown device '…'".
  explicit Device(const std::string& spec);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

inline const Device kCPU{DeviceType::CPU, 0};

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace kiln
