// The built-in English training text for `rewind make-model`: a few hand-written paragraphs
// followed by sentences generated from small word lists with a fixed LCG, so the text is
// deterministic, ~40 KB, and contains digits, punctuation, quotes, contractions and newlines.
// All of it was written for rewind and is dedicated to the public domain.
#include <array>
#include <cstdint>
#include <string>

#include "rewind/tokenizer/tokenizer.h"

namespace rw {

namespace {

constexpr std::string_view kOpening = R"(The Lighthouse Keeper's Notebook

Chapter 1. Arrival

The boat left the harbour at 6:45 in the morning, when the water was still grey and the gulls were arguing over the nets. There were 3 passengers: a teacher going home, a man with a crate of tools, and me. I had a small bag, a notebook, and a letter that said the old keeper would meet me at the pier. He didn't. The pier was empty, the wind was cold, and the only sound was the bell on the buoy, ringing twice, then once, then twice again.

I walked up the path to the tower. It was 212 steps from the shore to the door; I counted them because counting is what you do when you're nervous. The door was painted green, though the paint had mostly given up. Inside there was a stove, a table, two chairs, a shelf of books, and a calendar that still showed March of a year long gone.

"You're early," said a voice behind me. The keeper was shorter than I'd imagined, with a beard like a hedge and hands that looked as if they'd been carved from driftwood. "I said noon. It's barely eight."

"The boat leaves when it leaves," I said.

"That it does." He laughed, a short dry sound. "Well, you're here now. Put the kettle on, and I'll show you the lamp."

Chapter 2. The Lamp

The lamp was the reason for everything. It sat at the top of the tower in a room made almost entirely of glass, and it turned once every 10 seconds, throwing a beam that ships could see 18 miles away on a clear night. The keeper's job, and now mine, was to make sure it never stopped: to wind the clockwork, trim the wicks, clean the lenses, and write down what happened in the log.

"Every night," he said, tapping the logbook. "Time you lit it, time you put it out, the weather, the ships you saw. If nothing happens, you write that nothing happened. Nothing is also a kind of news."

The log went back 41 years. I read some of it that first evening. On 14 November, a storm with winds of 70 knots. On 2 January, fog so thick the keeper couldn't see the rail. On 9 July, a whale, "large, slow, friendly." On 23 August, "Nothing. Very pleasant."

Chapter 3. Weather

Weather on the island wasn't something that happened to you; it was something you lived inside. In the morning the sky might be clear and blue, by lunch a wall of cloud would roll in from the west, and by supper the rain would be falling sideways. The keeper had a barometer, a thermometer, and a wind gauge, and he read all three at 8, 12, 16 and 20 o'clock, writing the numbers in neat columns: 1013 hPa, 11.5 C, WSW 14 knots.

"Why so often?" I asked.

"Because the sea doesn't care what you expected," he said. "It only cares what you noticed."

I learned to notice. The way the gulls sat facing into the wind before a change. The smell of the air before rain, which is green and metallic. The colour of the water, which goes from blue to slate to something like pewter when a storm is 2 or 3 hours away.

Chapter 4. Letters

The supply boat came every 2 weeks, weather permitting, which meant about 20 times a year. It brought flour, oil, tea, paraffin, and letters. The keeper got few letters. I got more than I expected: my sister wrote every week, long pages about her garden, her children, and the price of bread (up 4 percent, she said, and nobody knew why).

I wrote back about the island. I told her about the 212 steps, the green door, the whale in the old log. I told her that the keeper snored like a foghorn and that I had started to find it comforting. I told her I was happy, and I was surprised to find that it was true.
)";

constexpr std::array<std::string_view, 40> kNames = {
    "Anna",   "Ben",   "Clara",  "David",  "Elena",  "Frank",  "Grace",  "Hugo",
    "Iris",   "James", "Kate",   "Leo",    "Maria",  "Nathan", "Olivia", "Peter",
    "Quinn",  "Rosa",  "Samuel", "Tara",   "Victor", "Wendy",  "Yusuf",  "Zoe",
    "Agnes",  "Bruno", "Celia",  "Dmitri", "Esther", "Felix",  "Greta",  "Henrik",
    "Ingrid", "Jonas", "Lena",   "Marcus", "Nadia",  "Oscar",  "Priya",  "Rupert"};
constexpr std::array<std::string_view, 87> kNouns = {
    "garden",     "river",      "window",     "letter",      "market",    "bridge",
    "kitchen",    "library",    "mountain",   "village",     "station",   "bicycle",
    "lantern",    "harbour",    "forest",     "school",      "bakery",    "orchard",
    "workshop",   "meadow",     "tower",      "island",      "road",      "field",
    "clock",      "piano",      "notebook",   "kettle",      "train",     "boat",
    "museum",     "cathedral",  "chimney",    "cottage",     "valley",    "canal",
    "factory",    "theatre",    "hospital",   "courtyard",   "balcony",   "staircase",
    "basement",   "lighthouse", "greenhouse", "telescope",   "umbrella",  "blanket",
    "compass",    "engine",     "ladder",     "barrel",      "cabinet",   "mirror",
    "painting",   "sculpture",  "festival",   "parliament",  "newspaper", "typewriter",
    "microscope", "calendar",   "orchestra",  "carriage",    "cellar",    "pavilion",
    "quarry",     "shipyard",   "vineyard",   "windmill",    "glacier",   "volcano",
    "desert",     "jungle",     "lagoon",     "prairie",     "tundra",    "reservoir",
    "aqueduct",   "monastery",  "fortress",   "observatory", "warehouse", "laboratory",
    "university", "pharmacy",   "restaurant"};
constexpr std::array<std::string_view, 54> kPlural = {
    "apples",    "books",       "birds",      "candles",    "children",     "coins",
    "letters",   "lamps",       "stones",     "friends",    "questions",    "tickets",
    "boxes",     "trees",       "songs",      "maps",       "shells",       "cups",
    "chairs",    "stories",     "clouds",     "ships",      "houses",       "keys",
    "blankets",  "photographs", "envelopes",  "potatoes",   "strawberries", "feathers",
    "pebbles",   "bottles",     "sandwiches", "newspapers", "umbrellas",    "pencils",
    "mushrooms", "carrots",     "journeys",   "mountains",  "rivers",       "windows",
    "gardens",   "engineers",   "musicians",  "farmers",    "sailors",      "painters",
    "teachers",  "visitors",    "neighbours", "travellers", "strangers",    "volunteers"};
constexpr std::array<std::string_view, 54> kVerbsPast = {
    "found",     "carried",   "painted",   "counted",    "repaired",   "visited",      "watched",
    "opened",    "cleaned",   "described", "remembered", "followed",   "measured",     "collected",
    "built",     "borrowed",  "noticed",   "sold",       "planted",    "wrote",        "crossed",
    "closed",    "checked",   "forgot",    "discovered", "explained",  "delivered",    "imagined",
    "organised", "recorded",  "returned",  "polished",   "sketched",   "whispered",    "shouted",
    "wandered",  "gathered",  "arranged",  "balanced",   "celebrated", "decorated",    "examined",
    "finished",  "harvested", "invented",  "launched",   "mended",     "photographed", "questioned",
    "rescued",   "scattered", "travelled", "unlocked",   "weighed"};
constexpr std::array<std::string_view, 32> kVerbs = {
    "bring",   "fix",     "read",    "find",     "paint",  "visit",   "open",   "clean",
    "carry",   "count",   "finish",  "check",    "plant",  "sell",    "build",  "write",
    "explain", "deliver", "imagine", "organise", "record", "return",  "polish", "sketch",
    "gather",  "arrange", "examine", "harvest",  "invent", "measure", "borrow", "describe"};
constexpr std::array<std::string_view, 49> kAdjectives = {
    "old",        "quiet",     "bright",      "narrow",    "small",    "heavy",      "warm",
    "distant",    "green",     "empty",       "careful",   "busy",     "strange",    "gentle",
    "simple",     "wooden",    "ancient",     "curious",   "enormous", "fragile",    "golden",
    "hollow",     "invisible", "magnificent", "ordinary",  "peculiar", "rusty",      "silver",
    "tremendous", "unusual",   "valuable",    "wonderful", "yellow",   "crooked",    "delicate",
    "elegant",    "famous",    "generous",    "hungry",    "lonely",   "mysterious", "northern",
    "southern",   "patient",   "restless",    "shallow",   "slippery", "sturdy",     "thoughtful"};
constexpr std::array<std::string_view, 12> kTimes = {
    "in the morning",    "after lunch",  "before dark",      "on Monday",
    "on Friday evening", "at dawn",      "late at night",    "during the storm",
    "last spring",       "every Sunday", "in early October", "after the rain"};
constexpr std::array<std::string_view, 12> kAdverbs = {
    "slowly",   "carefully", "quietly", "quickly", "happily",  "patiently",
    "suddenly", "gladly",    "twice",   "again",   "together", "alone"};
constexpr std::array<std::string_view, 10> kMonths = {"January",  "March",   "April",  "May",
                                                      "June",     "July",    "August", "September",
                                                      "November", "December"};

// Syllables for made-up place names, which give the trainer many distinct words to merge.
constexpr std::array<std::string_view, 48> kSyllables = {
    "ka",  "mor",  "len", "vast", "ri",  "tho", "bel",  "un",  "sar", "quin", "do",   "fel",
    "ash", "wick", "ton", "mere", "gar", "os",  "bri",  "nel", "har", "cot",  "ed",   "lin",
    "pra", "zu",   "ven", "ith",  "cal", "dro", "sten", "ora", "mil", "bay",  "rook", "ers",
    "tal", "ny",   "wes", "ford", "al",  "gan", "poe",  "thi", "vel", "mar",  "sk",   "ey"};

class Lcg {
 public:
  explicit Lcg(uint64_t seed) : x_(seed) {}
  uint32_t next() {
    x_ = x_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(x_ >> 33);
  }
  template <typename A>
  std::string_view pick(const A& a) {
    return a[next() % a.size()];
  }
  uint32_t below(uint32_t n) { return next() % n; }

 private:
  uint64_t x_;
};

std::string capitalize(std::string_view s) {
  std::string out(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z')
    out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

std::string place(Lcg& r) {
  std::string p;
  const uint32_t n = 2 + r.below(2);
  for (uint32_t i = 0; i < n; ++i) p += r.pick(kSyllables);
  return capitalize(p);
}

std::string sentence(Lcg& r) {
  const std::string n = std::to_string(2 + r.below(97));
  std::string s;
  switch (r.below(18)) {
    case 12:
    case 15:
      s = "The road from " + place(r) + " to " + place(r) + " is " + n + " miles long, and " +
          "it passes " + place(r) + " on the way.";
      break;
    case 13:
    case 16:
      s = std::string(r.pick(kNames)) + " was born in " + place(r) + ", a " +
          std::string(r.pick(kAdjectives)) + " town near " + place(r) + ".";
      break;
    case 14:
    case 17:
      s = "Ships from " + place(r) + " and " + place(r) + " brought " + n + " " +
          std::string(r.pick(kPlural)) + " to the " + std::string(r.pick(kNouns)) + ".";
      break;
    case 0:
      s = std::string(r.pick(kNames)) + " " + std::string(r.pick(kVerbsPast)) + " the " +
          std::string(r.pick(kAdjectives)) + " " + std::string(r.pick(kNouns)) + " " +
          std::string(r.pick(kTimes)) + ".";
      break;
    case 1:
      s = capitalize(r.pick(kTimes)) + ", " + std::string(r.pick(kNames)) + " and " +
          std::string(r.pick(kNames)) + " " + std::string(r.pick(kVerbsPast)) + " " + n + " " +
          std::string(r.pick(kPlural)) + " near the " + std::string(r.pick(kNouns)) + ".";
      break;
    case 2:
      s = "\"I'll " + std::string(r.pick(kVerbs)) + " the " + std::string(r.pick(kNouns)) + " " +
          std::string(r.pick(kTimes)) + ",\" said " + std::string(r.pick(kNames)) + ".";
      break;
    case 3:
      s = "\"We don't need " + n + " " + std::string(r.pick(kPlural)) + ",\" " +
          std::string(r.pick(kNames)) + " said " + std::string(r.pick(kAdverbs)) +
          ". \"We need one good " + std::string(r.pick(kNouns)) + ".\"";
      break;
    case 4:
      s = "The " + std::string(r.pick(kNouns)) + " was " + std::string(r.pick(kAdjectives)) +
          ", and the " + std::string(r.pick(kNouns)) + " was " + std::string(r.pick(kAdjectives)) +
          "; nobody knew why.";
      break;
    case 5:
      s = "On " + std::to_string(1 + r.below(28)) + " " + std::string(r.pick(kMonths)) + " " +
          std::to_string(1890 + r.below(130)) + ", the " + std::string(r.pick(kNouns)) + " held " +
          n + " " + std::string(r.pick(kPlural)) + ".";
      break;
    case 6:
      s = "Is it true that " + std::string(r.pick(kNames)) + " " + std::string(r.pick(kVerbsPast)) +
          " the " + std::string(r.pick(kNouns)) + " " + std::string(r.pick(kAdverbs)) + "?";
      break;
    case 7:
      s = "It's " + std::to_string(r.below(24)) + ":" + std::to_string(10 + r.below(50)) +
          " now, and the " + std::string(r.pick(kNouns)) + " isn't open yet.";
      break;
    case 8:
      s = "She'd " + std::string(r.pick(kVerbsPast)) + " it " + std::string(r.pick(kAdverbs)) +
          ", but they've " + std::string(r.pick(kVerbsPast)) + " it since (" + n + " times!).";
      break;
    case 9:
      s = "The price was " + std::to_string(1 + r.below(40)) + "." +
          std::to_string(10 + r.below(90)) + ", about " + std::to_string(r.below(60)) +
          "% more than last year.";
      break;
    case 10:
      s = "You can't " + std::string(r.pick(kVerbs)) + " a " + std::string(r.pick(kAdjectives)) +
          " " + std::string(r.pick(kNouns)) + " without " + std::string(r.pick(kPlural)) + ".";
      break;
    default:
      s = capitalize(r.pick(kAdverbs)) + ", the " + std::string(r.pick(kAdjectives)) + " " +
          std::string(r.pick(kPlural)) + " " + std::string(r.pick(kVerbsPast)) + " the " +
          std::string(r.pick(kNouns)) + " - all " + n + " of them.";
      break;
  }
  return s;
}

std::string make_text() {
  std::string t(kOpening);
  Lcg r(20240607);
  int chapter = 5;
  while (t.size() < 39000) {
    t += "\nChapter " + std::to_string(chapter++) + ". The " + capitalize(r.pick(kNouns)) + "\n\n";
    const uint32_t n_paragraphs = 3 + r.below(3);
    for (uint32_t p = 0; p < n_paragraphs; ++p) {
      if (r.below(5) == 0) {  // a short list
        const uint32_t n_items = 2 + r.below(3);
        for (uint32_t i = 0; i < n_items; ++i)
          t += "- " + std::to_string(2 + r.below(20)) + " " + std::string(r.pick(kPlural)) +
               " for the " + std::string(r.pick(kNouns)) + "\n";
        t += "\n";
        continue;
      }
      const uint32_t n_sentences = 3 + r.below(5);
      for (uint32_t s = 0; s < n_sentences; ++s) {
        if (s > 0) t += " ";
        t += sentence(r);
      }
      t += "\n\n";
    }
  }
  return t;
}

}  // namespace

std::string_view builtin_training_text() {
  static const std::string text = make_text();
  return text;
}

}  // namespace rw
