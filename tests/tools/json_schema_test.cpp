// Tool arguments checked against the tool's JSON Schema (tools/json_schema.hpp): the subset
// tools use, and a reason that names where and why.
#include "tools/json_schema.hpp"

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace wuhu::testing {

namespace json = boost::json;

namespace {

std::optional<std::string> why(const char* value, const char* schema) {
    return tools::schema_violation(json::parse(value), json::parse(schema));
}

constexpr const char* weather = R"({
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 5},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"enum": ["C", "F"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}
    },
    "required": ["city"],
    "additionalProperties": false
})";

}  // namespace

TEST(JsonSchema, ArgumentsThatFitPass) {
    EXPECT_EQ(why(R"({"city":"Paris"})", weather), std::nullopt);
    EXPECT_EQ(why(R"({"city":"Łódź","days":7,"unit":"C","tags":["a","b"]})", weather),
              std::nullopt)
        << "lengths in characters, not bytes";
    EXPECT_EQ(why(R"({"days":3.0,"city":"x"})", weather), std::nullopt) << "3.0 is an integer";
    EXPECT_EQ(why(R"("anything")", "true"), std::nullopt);
    EXPECT_EQ(why(R"({"x":1})", R"({"description":"no rules"})"), std::nullopt);
}

TEST(JsonSchema, EachRuleSaysWhereAndWhy) {
    const std::pair<const char*, const char*> cases[] = {
        {R"({})", R"(at /: "city" is required)"},
        {R"({"city":7})", "at /city: expected a string, got a number"},
        {R"({"city":""})", "at /city: must be at least 1 characters"},
        {R"({"city":"Lisbon"})", "at /city: must be at most 5 characters"},
        {R"({"city":"x","days":2.5})", "at /days: expected a integer, got a number"},
        {R"({"city":"x","days":0})", "at /days: must be at least 1"},
        {R"({"city":"x","days":8})", "at /days: must be at most 7"},
        {R"({"city":"x","unit":"K"})", R"(at /unit: expected one of ["C","F"])"},
        {R"({"city":"x","tags":["a",1]})", "at /tags/1: expected a string, got a number"},
        {R"({"city":"x","tags":["a","b","c"]})", "at /tags: must have at most 2 items"},
        {R"({"city":"x","zip":1})", R"(at /: "zip" is not allowed)"},
        {R"([1])", "at /: expected a object, got a array"},
    };
    for (const auto& [value, expected] : cases) {
        EXPECT_EQ(why(value, weather), std::optional<std::string>(expected)) << value;
    }
}

TEST(JsonSchema, CombinatorsAndTypeLists) {
    const char* id = R"({"anyOf":[{"type":"string"},{"type":"integer","minimum":0}]})";
    EXPECT_EQ(why("\"a\"", id), std::nullopt);
    EXPECT_EQ(why("3", id), std::nullopt);
    EXPECT_TRUE(why("-1", id));
    const char* one = R"({"oneOf":[{"type":"number"},{"type":"integer"}]})";
    EXPECT_TRUE(why("3", one)) << "an integer is a number too: two match";
    EXPECT_EQ(why("3.5", one), std::nullopt);
    EXPECT_EQ(why("null", R"({"type":["string","null"]})"), std::nullopt);
    EXPECT_TRUE(why("true", R"({"type":["string","null"]})"));
    EXPECT_TRUE(why("5", R"({"not":{"type":"integer"}})"));
    EXPECT_TRUE(why("5", R"({"allOf":[{"minimum":1},{"maximum":4}]})"));
    EXPECT_TRUE(why("5", R"({"const":4})"));
    EXPECT_TRUE(why("5", "false"));
}

}  // namespace wuhu::testing
