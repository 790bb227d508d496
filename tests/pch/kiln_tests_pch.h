// The headers that most of tests/kiln_tests's files include, compiled once for the whole
// program into a precompiled header (tests/meson.build: cpp_pch). Meson puts it in front
// of every file of the program; each file still includes what it uses itself.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kiln.h"
#include "test_util.h"
#include "transformer/kiln_transformer.h"
