// The callbacks by number (Cb, generated in callback_base.h) and by name.
#pragma once

#include <string>

#include "callback_base.h"
#include "state.h"

namespace profharness {

inline constexpr int kCbCount = static_cast<int>(Cb::Count_);
static_assert(kCbCount <= kCallbackCountMax, "raise kCallbackCountMax");

// The Cb number of a callback name, or -1 (events.cpp).
int callback_index(const std::string& name);

}  // namespace profharness
