// The tool registry (tools/tools.hpp): the fleet's tools every session calls, a tenant's own
// only its sessions (issue 34: one tenant's session never calls another's MCP server).
#include "tools/tools.hpp"

#include <gtest/gtest.h>

namespace wuhu::testing {

namespace {

class named final : public tools::tool {
  public:
    named(std::string name, std::string description)
        : spec_{std::move(name), std::move(description), R"({"type":"object"})"} {}
    const session::tool_spec& spec() const override { return spec_; }
    bool idempotent() const override { return true; }
    boost::asio::awaitable<tools::tool_output> execute(std::string,
                                                       tools::tool_call_context) override {
        co_return tools::tool_output{spec_.description, false};
    }

  private:
    session::tool_spec spec_;
};

std::vector<std::string> names(const std::vector<session::tool_spec>& specs) {
    std::vector<std::string> out;
    for (const auto& s : specs) {
        out.push_back(s.name + "=" + s.description);
    }
    return out;
}

session::session_id sid(std::string_view tenant, std::string_view local) {
    return tenant.empty() ? *session::session_id::parse(local)
                          : *session::session_id::of_tenant(tenant, local);
}

}  // namespace

TEST(ToolRegistry, ATenantsOwnToolsAreOfferedToItsSessionsOnlyAndGoBeforeTheFleets) {
    tools::tool_registry r;
    r.put(std::make_shared<named>("search", "the fleet's"));
    r.put(std::make_shared<named>("files", "acme's"), "acme");
    r.put(std::make_shared<named>("search", "acme's"), "acme");
    r.put(std::make_shared<named>("crm", "globex's"), "globex");

    EXPECT_EQ(names(r.specs({}, "acme")),
              (std::vector<std::string>{"files=acme's", "search=acme's"}));
    EXPECT_EQ(names(r.specs({}, "globex")),
              (std::vector<std::string>{"crm=globex's", "search=the fleet's"}));
    EXPECT_EQ(names(r.specs({}, "initech")), (std::vector<std::string>{"search=the fleet's"}));
    EXPECT_EQ(names(r.specs({})), (std::vector<std::string>{"search=the fleet's"}))
        << "a session of no tenant";
    EXPECT_EQ(names(r.specs({"search", "crm"}, "globex")),
              (std::vector<std::string>{"crm=globex's", "search=the fleet's"}));
    EXPECT_EQ(names(r.specs({"crm"}, "acme")), std::vector<std::string>{});

    EXPECT_EQ(r.find("files", {}, "globex"), nullptr) << "another tenant's tool";
    EXPECT_EQ(r.find("crm", {}, "acme"), nullptr);
    EXPECT_EQ(r.find("crm", {}), nullptr);
    ASSERT_NE(r.find("files", {}, "acme"), nullptr);
    EXPECT_EQ(r.find("search", {}, "acme")->spec().description, "acme's");
    EXPECT_EQ(r.find("search", {}, "globex")->spec().description, "the fleet's");
    EXPECT_EQ(r.find("files", {"search"}, "acme"), nullptr) << "not enabled";
    EXPECT_EQ(r.own("search", "")->spec().description, "the fleet's");
    EXPECT_EQ(r.own("files", ""), nullptr);

    r.remove("search", "acme");
    EXPECT_EQ(r.find("search", {}, "acme")->spec().description, "the fleet's");
    r.remove("files", "globex");  // not globex's: nothing changes
    EXPECT_NE(r.find("files", {}, "acme"), nullptr);
}

TEST(ToolRegistry, ApprovalTermsAreThoseOfTheToolTheSessionCalls) {
    tools::tool_registry r;
    r.put(std::make_shared<named>("search", "the fleet's"));
    r.put(std::make_shared<named>("search", "acme's"), "acme");
    session::tool_approval always;
    always.mode = session::approval_mode::always;
    r.set_approval("search", always, "acme");
    const session::approval_settings defaults;
    EXPECT_TRUE(r.approval_for("search", defaults, "acme")) << "acme's own asks";
    EXPECT_FALSE(r.approval_for("search", defaults, "globex")) << "the fleet's does not";
    EXPECT_FALSE(r.approval_for("search", defaults));
}

TEST(ToolRegistry, SessionsKeptWithoutATenantAreTheDefaultTenants) {
    tools::tool_registry r;
    EXPECT_EQ(r.tenant_of(sid("", "s1")), "");
    EXPECT_EQ(r.tenant_of(sid("acme", "s1")), "acme");
    r.set_default_tenant("acme");
    EXPECT_EQ(r.tenant_of(sid("", "s1")), "acme");
    EXPECT_EQ(r.tenant_of(sid("globex", "s1")), "globex");
}

}  // namespace wuhu::testing
