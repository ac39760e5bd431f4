// engine/serving/stop_strings.h: text released piece by piece never shows a stop string or anything after it,
// never holds back more than could start one, and releases whole UTF-8 characters only.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/serving/stop_strings.h"

namespace {

// Feeds the pieces and returns what was released.
std::string released(kvx::StopStrings& stops, const std::vector<std::string>& pieces) {
    std::string out;
    for (const std::string& piece : pieces) out += stops.feed(piece);
    return out;
}

}  // namespace

TEST_CASE("a stop string across pieces ends the text before it") {
    kvx::StopStrings stops({"\n\n", "THE END"});
    CHECK(stops.feed("Hi") == "Hi");
    CHECK(stops.feed("!\n") == "!");  // the newline may start "\n\n"
    CHECK(stops.feed("\nmore") == "");
    CHECK(stops.matched());
    CHECK(stops.feed("later") == "");
    CHECK(stops.flush() == "");
}

TEST_CASE("held text that turns out not to be a stop string is released") {
    kvx::StopStrings stops({"THE END"});
    CHECK(released(stops, {"and THE", " E", "ND?"}) == "and ");
    CHECK(stops.matched());
    kvx::StopStrings other({"THE END"});
    CHECK(released(other, {"and THE", " EAGLE"}) == "and THE EAGLE");
    CHECK_FALSE(other.matched());
    kvx::StopStrings tail({"THE END"});
    CHECK(released(tail, {"so THE E"}) == "so ");
    CHECK(tail.flush() == "THE E");  // the choice ended another way: nothing is lost
}

TEST_CASE("the earliest of several stop strings wins, and empty ones are ignored") {
    kvx::StopStrings stops({"", "cd", "bcde"});
    CHECK(released(stops, {"abcdef"}) == "a");  // "bcde" starts first
    kvx::StopStrings none({""});
    CHECK(released(none, {"abc"}) == "abc");
}

TEST_CASE("a UTF-8 character split across pieces is released whole") {
    kvx::StopStrings stops({});
    const std::string euro = "\xE2\x82\xAC";  // U+20AC, three bytes
    CHECK(stops.feed("5 " + euro.substr(0, 1)) == "5 ");
    CHECK(stops.feed(euro.substr(1, 1)) == "");
    CHECK(stops.feed(euro.substr(2, 1) + "!") == euro + "!");
    const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, four bytes
    CHECK(stops.feed(emoji.substr(0, 3)) == "");
    CHECK(stops.feed(emoji.substr(3)) == emoji);
}
