// schema_oracle: llama.cpp's JSON-schema -> GBNF converter behind JSON lines, for measuring chatcodec.
// A developer tool (not part of the package, not run in CI). Our own code: it links llama.cpp's
// `llama-common` library and calls its public API (json-schema-to-grammar.h, json-schema.h).
//
// One request per stdin line, one response per stdout line.
//   {"id", "schema": {...}}
//       -> {"id", "ok": true, "grammar": "<json_schema_to_grammar(schema, force_gbnf=true)>", "warnings": "..."}
//       -> {"id", "ok": false, "error": "<what() of the exception>"}
//   {"id", "steps": [{"rule": [name, body]} | {"schema": [name, schema]}, ...]}
//       runs build_grammar() with the steps in order (add_rule / add_schema of a document built
//       from each schema; "dotall": true sets common_grammar_options.dotall),
//       -> {"id", "ok", "names": [name each step returned], "grammar", "warnings"}
// "warnings" is what the converter wrote to stderr for this request (its incomplete-conversion notes).
#include "json-schema-to-grammar.h"
#include "json-schema.h"
#include "json.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

// stderr goes to a scratch file, read back after each request
static std::string g_err_path;
static long g_err_pos = 0;

static std::string take_warnings() {
    fflush(stderr);
    std::ifstream f(g_err_path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string all = ss.str();
    std::string tail = all.substr(std::min<size_t>((size_t) g_err_pos, all.size()));
    g_err_pos = (long) all.size();
    return tail;
}

static common_json run_steps(const common_json & steps, bool dotall) {
    std::vector<std::unique_ptr<common_chat_schema_document>> docs;
    common_json names = common_json::array();
    std::string grammar = build_grammar([&](const common_grammar_builder & builder) {
        for (size_t i = 0; i < steps.size(); i++) {
            const common_json & step = steps.at(i);
            if (step.contains("rule")) {
                const common_json & r = step.at("rule");
                names.push_back(builder.add_rule(r.at(0).get<std::string>(), r.at(1).get<std::string>()));
            } else {
                const common_json & s = step.at("schema");
                docs.push_back(std::make_unique<common_chat_schema_document>(common_chat_schema_from_json(s.at(1))));
                names.push_back(builder.add_schema(s.at(0).get<std::string>(), *docs.back()->root));
            }
        }
    }, common_grammar_options{dotall});
    common_json out = common_json::object();
    out["names"] = names;
    out["grammar"] = grammar;
    return out;
}

int main(int argc, char ** argv) {
    g_err_path = argc > 1 ? argv[1] : "schema_oracle.stderr";
    if (!freopen(g_err_path.c_str(), "w", stderr)) {
        return 1;
    }
    std::string line;
    while (std::getline(std::cin, line)) {
        common_json out = common_json::object();
        try {
            common_json req = common_json::parse(line);
            out["id"] = req.contains("id") ? req.at("id") : common_json();
            try {
                if (req.contains("steps")) {
                    common_json res = run_steps(req.at("steps"), req.contains("dotall") && req.at("dotall").get<bool>());
                    out["names"] = res.at("names");
                    out["grammar"] = res.at("grammar");
                } else {
                    out["grammar"] = json_schema_to_grammar(req.at("schema"), /* force_gbnf= */ true);
                }
                out["ok"] = true;
            } catch (const std::exception & e) {
                out["ok"] = false;
                out["error"] = std::string(e.what());
            }
        } catch (const std::exception & e) {
            out["ok"] = false;
            out["error"] = std::string("bad request: ") + e.what();
        }
        out["warnings"] = take_warnings();
        // dump_safe: a grammar may hold bytes that are not UTF-8 (a pattern quantifier splits a character)
        std::cout << out.dump_safe() << "\n" << std::flush;
    }
    return 0;
}
