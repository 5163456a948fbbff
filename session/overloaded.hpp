// The usual visitor helper: overloaded{[](A){}, [](B){}}.
#pragma once

namespace wuhu::session {

template <class... F>
struct overloaded : F... {
    using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;

}  // namespace wuhu::session
