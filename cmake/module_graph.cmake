# Configure-time checks of the module graph (docs/decisions.md, "Modules and their rooms"):
#
#  * every `#include "<module>/..."` in a module's sources names a module its target links
#    (directly or through another), so an include can never run back up the graph, and no
#    module links itself through its dependencies (no cycle);
#  * the edges of WUHU_FORBIDDEN_EDGES do not exist, even through another module (providers/
#    and tools/ know neither the store nor the loop);
#  * the pure modules (session/, protocol/) link nothing but the standard library and
#    Boost.JSON, and include no header that does IO, starts a thread or draws randomness from
#    the machine. (<chrono> is allowed for durations; reading a clock is a review matter.)
#
# A violation stops the configure step with the file and the include that broke the rule.

set(WUHU_MODULES session protocol runtime storage ownership providers nats tools mcp worker client
    broker app metrics console)
set(WUHU_PURE_MODULES session protocol)
# Edges that must never exist, directly or not ("a:b": a/ never links b/): the providers and the
# tools (MCP's too) know neither the store nor the loop; the loop's rooms below the worker never
# reach up.
set(WUHU_FORBIDDEN_EDGES
    providers:storage providers:ownership providers:worker providers:tools providers:nats
    tools:storage tools:ownership tools:worker tools:providers
    mcp:storage mcp:ownership mcp:worker
    runtime:storage runtime:nats
    ownership:worker storage:ownership
    client:worker client:broker client:storage client:ownership)
set(WUHU_PURE_LINKS Boost::headers Boost::json)
# Headers a pure module may not include: IO, clocks, threads, randomness from the machine.
# (<cstdio> is allowed: snprintf formats, and WUHU_ASSERT prints to stderr as it aborts.)
set(WUHU_IMPURE_INCLUDES
    "<boost/asio" "<boost/beast" "<thread>" "<mutex>" "<condition_variable>" "<future>"
    "<fstream>" "<iostream>" "<filesystem>" "<random>" "<ctime>" "<unistd.h>"
    "<sqlite3.h>" "<pqxx" "<libpq" "<nats" "<spdlog" "<prometheus")

# The wuhu_* targets `target` links, directly or not, in `out`; the imported ones in `out_ext`.
function(wuhu_link_closure target out out_ext)
    set(seen)
    set(ext)
    set(todo ${target})
    while(todo)
        list(POP_FRONT todo t)
        get_target_property(links ${t} LINK_LIBRARIES)
        get_target_property(ilinks ${t} INTERFACE_LINK_LIBRARIES)
        foreach(l IN LISTS links ilinks)
            if(l MATCHES "^wuhu_")
                if(NOT l IN_LIST seen)
                    list(APPEND seen ${l})
                    list(APPEND todo ${l})
                endif()
            elseif(l AND NOT l MATCHES "NOTFOUND$" AND NOT l MATCHES "^\\$<")
                list(APPEND ext ${l})
            endif()
        endforeach()
    endwhile()
    list(REMOVE_DUPLICATES ext)
    set(${out} ${seen} PARENT_SCOPE)
    set(${out_ext} ${ext} PARENT_SCOPE)
endfunction()

foreach(edge IN LISTS WUHU_FORBIDDEN_EDGES)
    string(REPLACE ":" ";" pair ${edge})
    list(GET pair 0 from)
    list(GET pair 1 to)
    wuhu_link_closure(wuhu_${from} closure external)
    if(wuhu_${to} IN_LIST closure)
        message(FATAL_ERROR "module graph: ${from}/ links ${to}/, which it must never know")
    endif()
endforeach()

foreach(m IN LISTS WUHU_MODULES)
    set(target wuhu_${m})
    wuhu_link_closure(${target} closure external)
    if(target IN_LIST closure)
        message(FATAL_ERROR "module graph: ${m}/ links itself through its dependencies (a cycle)")
    endif()
    if(m IN_LIST WUHU_PURE_MODULES)
        foreach(l IN LISTS external)
            if(NOT l IN_LIST WUHU_PURE_LINKS)
                message(FATAL_ERROR "module graph: ${m}/ is pure but links ${l}")
            endif()
        endforeach()
        foreach(dep IN LISTS closure)
            string(REPLACE "wuhu_" "" dm ${dep})
            if(NOT dm IN_LIST WUHU_PURE_MODULES)
                message(FATAL_ERROR "module graph: ${m}/ is pure but links ${dep}")
            endif()
        endforeach()
    endif()
    file(GLOB sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${m}/*.cpp
         ${PROJECT_SOURCE_DIR}/${m}/*.hpp)
    foreach(f IN LISTS sources)
        file(STRINGS ${f} includes REGEX "^#[ \t]*include")
        foreach(inc IN LISTS includes)
            if(inc MATCHES "^#[ \t]*include[ \t]*\"([a-z_]+)/")
                set(used ${CMAKE_MATCH_1})
                if(used IN_LIST WUHU_MODULES AND NOT used STREQUAL m
                   AND NOT wuhu_${used} IN_LIST closure)
                    message(FATAL_ERROR "module graph: ${f} includes ${used}/, which ${m}/ does "
                                        "not depend on (wuhu_${m} does not link wuhu_${used})")
                endif()
            endif()
            if(m IN_LIST WUHU_PURE_MODULES)
                foreach(bad IN LISTS WUHU_IMPURE_INCLUDES)
                    string(FIND "${inc}" "${bad}" at)
                    if(NOT at EQUAL -1)
                        message(FATAL_ERROR "module graph: ${f} is in a pure module but has "
                                            "${inc}")
                    endif()
                endforeach()
            endif()
        endforeach()
    endforeach()
endforeach()
