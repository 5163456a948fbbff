// WUHU_ASSERT: an invariant that holds unless there is a bug. Checked in every build type;
// a violation prints the condition and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

#define WUHU_ASSERT(cond, msg)                                                                    \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            std::fprintf(stderr, "%s:%d: assertion failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
                         msg);                                                                    \
            std::abort();                                                                         \
        }                                                                                         \
    } while (false)
