// Standard and pool headers every ISA path's translation unit includes BEFORE its
// `#pragma GCC target` (see cpu_isa_impl.h for why the order matters).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu_isa.h"
#include "cpu_knobs.h"
#include "cpu_simd.h"
#include "thread_pool.h"
