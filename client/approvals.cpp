#include "client/approvals.hpp"

#include <set>
#include <string>

namespace wuhu::client {

namespace json = boost::json;

json::array pending_approvals(const json::object& reply) {
    const auto* patch = reply.if_contains("patch");
    const auto* entries = patch != nullptr && patch->is_object()
                              ? patch->as_object().if_contains("transcript")
                              : nullptr;
    if (entries == nullptr || !entries->is_array()) {
        return {};
    }
    // Walking back: a call is settled by its decision, its result, or a newer response (whose
    // calls are the only ones that can still wait).
    std::set<std::string> settled;
    json::array out;
    const auto& all = entries->as_array();
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
        if (!it->is_object()) {
            continue;
        }
        const auto& e = it->as_object();
        const auto* type = e.if_contains("type");
        const auto* call = e.if_contains("call");
        if (type == nullptr || !type->is_string()) {
            continue;
        }
        if (*type == "assistant_message") {
            break;
        }
        if (call == nullptr || !call->is_string()) {
            continue;
        }
        const std::string id(call->as_string());
        if (*type == "approval_decided" || *type == "tool_result") {
            settled.insert(id);
        } else if (*type == "approval_requested" && !settled.contains(id)) {
            out.insert(out.begin(), e);
        }
    }
    return out;
}

}  // namespace wuhu::client
