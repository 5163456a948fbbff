// An error category backed by a table of {wire code, message} indexed by the enum's value.
// Each module's errc keeps its table beside its enum; this is the one implementation of the
// category over such a table.
#pragma once

#include <boost/system/error_category.hpp>

#include <array>
#include <string>
#include <string_view>

namespace wuhu::session {

struct error_text {
    std::string_view code;
    std::string_view message;
};

// A category whose values have stable wire names: error replies use code() for their "code".
class coded_category : public boost::system::error_category {
  public:
    virtual std::string_view code(int ev) const = 0;
};

// The wire name of `ec`: its coded_category's code, or "internal" for any other category.
inline std::string_view wire_code(const boost::system::error_code& ec) {
    const auto* c = dynamic_cast<const coded_category*>(&ec.category());
    return c != nullptr ? c->code(ec.value()) : std::string_view("internal");
}

template <std::size_t N>
class table_category final : public coded_category {
  public:
    table_category(const char* name, const std::array<error_text, N>& texts,
                   std::string_view unknown)
        : name_(name), texts_(texts), unknown_(unknown) {}

    const char* name() const noexcept override { return name_; }
    std::string message(int ev) const override {
        return std::string(valid(ev) ? texts_[static_cast<std::size_t>(ev)].message : unknown_);
    }
    // The stable wire name of `ev`, or "unknown".
    std::string_view code(int ev) const override {
        return valid(ev) ? texts_[static_cast<std::size_t>(ev)].code : std::string_view("unknown");
    }

  private:
    bool valid(int ev) const { return ev >= 0 && static_cast<std::size_t>(ev) < N; }
    const char* name_;
    const std::array<error_text, N>& texts_;
    std::string_view unknown_;
};

}  // namespace wuhu::session
