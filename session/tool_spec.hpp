// What a model is told of one tool: its name, what it does, and the JSON Schema of its
// arguments. The tools (tools/) describe themselves by it; the providers (providers/) put it in
// an inference request.
#pragma once

#include <string>

namespace wuhu::session {

struct tool_spec {
    std::string name;
    std::string description;
    std::string schema;  // JSON Schema of the arguments, as JSON text
};

}  // namespace wuhu::session
