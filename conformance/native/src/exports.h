// The symbols the probe .so exports (docs/design.md, "Exports of the probe .so"); everything else is hidden.
#pragma once

#define PROFHARNESS_EXPORT extern "C" __attribute__((visibility("default")))
