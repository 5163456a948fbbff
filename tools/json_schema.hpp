// Validating a tool call's arguments against the tool's JSON Schema before the call (issue
// 14: a tool service never sees arguments its schema refuses; the model gets the reason as
// the tool's error result and may try again).
//
// The subset tools' schemas use (JSON Schema 2020-12 and draft 7 agree on it): `type` (a name
// or a list; "integer" is a number without a fraction), `properties`, `required`,
// `additionalProperties` (false or a schema), `items` (a schema), `enum`, `const`,
// `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (numbers), `minLength`,
// `maxLength` (in code points), `minItems`, `maxItems`, `anyOf`, `oneOf`, `allOf`, `not`. Other
// keywords (`description`, `title`, `format`, `default`, `$schema`, `pattern`, …) do not
// restrict here: the service validates what this subset does not. A schema that is not a JSON
// object (or `true`) accepts everything.
//
// Pure: no IO.
#pragma once

#include <boost/json/value.hpp>

#include <optional>
#include <string>

namespace wuhu::tools {

// Why `v` does not satisfy `schema` ("at /city: expected a string, got a number"), or
// nullopt when it does.
std::optional<std::string> schema_violation(const boost::json::value& v,
                                            const boost::json::value& schema);

}  // namespace wuhu::tools
