#include "console/console.hpp"

#include <cstddef>

namespace wuhu::console {

namespace detail {
struct embedded {
    std::string_view path;
    const unsigned char* data;
    std::size_t size;
};
extern const embedded files[];
extern const std::size_t file_count;
}  // namespace detail

namespace {

std::string_view type_of(std::string_view path) {
    const auto dot = path.rfind('.');
    const auto ext = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    if (ext == "html") {
        return "text/html; charset=utf-8";
    }
    if (ext == "js") {
        return "text/javascript; charset=utf-8";
    }
    if (ext == "css") {
        return "text/css; charset=utf-8";
    }
    if (ext == "png") {
        return "image/png";
    }
    if (ext == "svg") {
        return "image/svg+xml";
    }
    return "text/plain; charset=utf-8";  // LICENSE files and the like
}

}  // namespace

std::optional<file> find(std::string_view path) {
    constexpr std::string_view root = "/console/";
    if (!path.starts_with(root)) {
        return std::nullopt;
    }
    auto name = path.substr(root.size());
    if (name.empty()) {
        name = "index.html";
    }
    for (std::size_t i = 0; i < detail::file_count; ++i) {
        const auto& f = detail::files[i];
        if (f.path == name) {  // exact names only: nothing climbs out of the table
            return file{type_of(name),
                        std::string_view(reinterpret_cast<const char*>(f.data), f.size)};
        }
    }
    return std::nullopt;
}

}  // namespace wuhu::console
