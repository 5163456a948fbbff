#include "storage/errc.hpp"

#include <array>
#include <string>

namespace wuhu::storage {
namespace {

struct errc_text {
    std::string_view code;
    std::string_view message;
};

constexpr std::array<errc_text, errc_count> texts{{
    {"ok", "success"},
    {"lease_lost", "a newer owner holds this session; this worker must drop it"},
    {"conflict", "the owner's state does not match the stored state"},
    {"unavailable", "the store failed or the outcome of the write is unknown"},
    {"corrupt", "stored session data could not be decoded"},
}};

class category final : public boost::system::error_category {
  public:
    const char* name() const noexcept override { return "wuhu.storage"; }
    std::string message(int ev) const override {
        if (ev < 0 || ev >= errc_count) {
            return "unknown storage error";
        }
        return std::string(texts[static_cast<std::size_t>(ev)].message);
    }
};

}  // namespace

std::string_view code_name(errc e) {
    auto i = static_cast<std::size_t>(e);
    return i < texts.size() ? texts[i].code : std::string_view("unknown");
}

const boost::system::error_category& storage_category() noexcept {
    static const category instance;
    return instance;
}

}  // namespace wuhu::storage
