#include "core/device.h"

#include "core/error.h"

namespace kiln {

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = DeviceType::CPU;
    return;
  }
  if (spec.rfind("cuda", 0) == 0) {
    type = DeviceType::CUDA;
    if (spec.size() == 4) return;
    KILN_CHECK(spec[4] == ':' && spec.size() > 5 &&
                   spec.size() <= 14 && spec.find_first_not_of("0123456789", 5) == std::string::npos,
               "device", "unknown device '", spec, "' (expected cpu, cuda or cuda:N)");
    index = std::stoi(spec.substr(5));
    return;
  }
  KILN_FAIL("device", "unknown device '", spec, "' (expected cpu, cuda or cuda:N)");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace kiln
