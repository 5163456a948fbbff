// A fresh directory under the system temp dir, removed with everything in it when destroyed.
#pragma once

#include <filesystem>
#include <random>
#include <string>

namespace wuhu::testing {

class temp_dir {
  public:
    explicit temp_dir(const std::string& prefix = "wuhu-test") {
        std::random_device rd;
        path_ = std::filesystem::temp_directory_path() /
                (prefix + "-" + std::to_string(rd()) + std::to_string(rd()));
        std::filesystem::create_directories(path_);
    }
    temp_dir(const temp_dir&) = delete;
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    const std::filesystem::path& path() const { return path_; }

  private:
    std::filesystem::path path_;
};

}  // namespace wuhu::testing
