// Stop strings over streamed text: a choice's text arrives a token's piece at a time, and a stop string may
// span pieces. Text that could still be the start of a stop string is held back until the next piece shows
// whether it is; the text before the first stop string is all that is ever released. The bytes of a UTF-8
// character split across tokens wait the same way, so that released text is whole characters.
//
//   stops {"\n\n"}   feed "Hi"   -> "Hi"        feed "!\n" -> "!" (holds "\n")
//                    feed "\nX"  -> matched: nothing more released, the choice ends
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvx {

class StopStrings {
public:
    explicit StopStrings(std::vector<std::string> stops);  // empty strings are ignored

    // Adds a piece and returns the text now safe to show. Once a stop string has matched, returns nothing.
    std::string feed(std::string_view piece);
    bool matched() const { return matched_; }
    // The held-back text, for a choice that ends another way.
    std::string flush();

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool matched_ = false;
};

}  // namespace kvx
