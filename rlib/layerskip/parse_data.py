"""A synthetic TOPv2-like semantic parsing task (paper 004, Sec. 5.3 "Finetuning on TOPv2", Fig. 10b, Tables 5, 6, 10).

The paper fine-tunes its 1.5B model on TOPv2 (task-oriented utterances, each annotated with an intent and slots),
post-processed into JSON "to be more aligned with code pre-training", and scores exact match of the generated parse.
TOPv2 cannot be fetched offline, so this module writes utterances of the same kind from templates: eight intents of
the assistant domains TOPv2 covers (alarm, weather, reminder, timer, music, navigation, messaging, events), each
with several phrasings and slot values drawn from fixed pools. An example is

    utterance   "remind me to call mom tomorrow at 6 pm"
    parse       {"intent": "CREATE_REMINDER", "slots": {"todo": "call mom", "date_time": "tomorrow at 6 pm"}}

and the model sees `"<utterance> => <parse>"` followed by the tokenizer's EOS; a prompt is `"<utterance> =>"` and the
target is `" <parse>"` + EOS. Slot values are copied verbatim from the utterance, as in TOPv2. Splits are disjoint by
utterance: `examples(split)` draws from one seeded stream and keeps the train, validation and test utterances apart.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

from rlib.config import ConfigError

__all__ = ["INTENTS", "ParseExample", "ParseWindows", "examples", "target_ids"]

SPLITS = ("train", "validation", "test")
SEPARATOR = " =>"

_TIMES = ["6 am", "6:30 am", "7 am", "7:15 am", "8 am", "9:45 am", "noon", "1 pm", "3:30 pm", "5 pm", "6 pm",
          "8:20 pm", "10 pm", "midnight"]
_DAYS = ["today", "tomorrow", "on monday", "on tuesday", "on friday", "this weekend", "next week", "on sunday"]
_CITIES = ["paris", "boston", "tokyo", "new york", "seattle", "berlin", "cairo", "lima", "austin", "oslo", "denver",
           "madrid"]
_PLACES = ["the airport", "the office", "central park", "the train station", "grandma's house", "the mall",
           "the library", "downtown", "the stadium", "the beach"]
_TODOS = ["call mom", "buy milk", "pay rent", "water the plants", "email the landlord", "pick up the kids",
          "book a dentist appointment", "take out the trash", "renew my passport", "feed the cat"]
_DURATIONS = ["5 minutes", "10 minutes", "20 minutes", "half an hour", "an hour", "90 seconds", "2 hours",
              "45 minutes"]
_SONGS = ["yellow", "hey jude", "bad guy", "clocks", "hello", "let it be", "thriller", "imagine"]
_ARTISTS = ["coldplay", "the beatles", "adele", "billie eilish", "michael jackson", "john lennon", "queen",
            "taylor swift"]
_GENRES = ["jazz", "rock", "classical music", "hip hop", "country", "lo-fi beats", "blues"]
_CONTACTS = ["mom", "dad", "sarah", "alex", "my boss", "john", "the team", "grandpa"]
_MESSAGES = ["i am running late", "dinner is ready", "see you at 8", "call me back", "happy birthday",
             "the meeting moved", "i landed safely"]
_WEATHER = ["rain", "snow", "be sunny", "be windy"]

# intent -> templates; a {slot} in braces is filled from the pool named like it and copied into the parse
INTENTS: dict[str, list[str]] = {
    "CREATE_ALARM": ["set an alarm for {time}", "wake me up at {time} {day}", "alarm at {time} {day} please",
                     "i need an alarm for {time}"],
    "GET_WEATHER": ["what is the weather in {city} {day}", "will it {weather} in {city} {day}",
                    "how cold is it in {city}", "weather forecast for {city}"],
    "CREATE_REMINDER": ["remind me to {todo} {day} at {time}", "remind me to {todo} at {time}",
                        "set a reminder to {todo} {day}", "don't let me forget to {todo}"],
    "SET_TIMER": ["set a timer for {duration}", "start a {duration} timer", "timer for {duration} please"],
    "PLAY_MUSIC": ["play {song} by {artist}", "play some {genre}", "put on {artist}", "i want to hear {song}"],
    "GET_DIRECTIONS": ["how do i get to {place} from {place2}", "directions to {place}",
                       "navigate to {place} avoiding tolls", "how far is {place} from {place2}"],
    "SEND_MESSAGE": ["text {contact} that {message}", "send a message to {contact} saying {message}",
                     "tell {contact} {message}"],
    "GET_EVENT": ["what is happening in {city} {day}", "any concerts in {city} {day}", "find events near {place}"],
}
_POOLS = {"time": _TIMES, "day": _DAYS, "city": _CITIES, "place": _PLACES, "place2": _PLACES, "todo": _TODOS,
          "duration": _DURATIONS, "song": _SONGS, "artist": _ARTISTS, "genre": _GENRES, "contact": _CONTACTS,
          "message": _MESSAGES, "weather": _WEATHER}
# template slot -> the parse's slot name (TOPv2 style); "day" and "time" merge into one date_time slot
_SLOT_NAMES = {"time": "date_time", "day": "date_time", "city": "location", "place": "destination", "place2": "source",
               "todo": "todo", "duration": "duration", "song": "music_track_title", "artist": "music_artist_name",
               "genre": "music_genre", "contact": "recipient", "message": "content", "weather": "weather_attribute"}


@dataclass(frozen=True)
class ParseExample:
    utterance: str
    parse: str  # compact JSON: {"intent": ..., "slots": {...}}

    @property
    def prompt(self) -> str:
        return self.utterance + SEPARATOR

    @property
    def target(self) -> str:
        return " " + self.parse


def _fill(intent: str, template: str, rng: random.Random) -> ParseExample:
    values = {name: rng.choice(pool) for name, pool in _POOLS.items() if "{" + name + "}" in template}
    if "place2" in values:
        while values["place2"] == values.get("place"):
            values["place2"] = rng.choice(_PLACES)
    utterance = template.format(**values)
    slots: dict[str, str] = {}
    for name in sorted(values, key=lambda n: template.index("{" + n + "}")):  # slots in utterance order
        key = _SLOT_NAMES[name]
        slots[key] = f"{slots[key]} {values[name]}" if key in slots else values[name]
    if "{day} at {time}" in template:  # keep the utterance's own words for the merged span
        slots["date_time"] = f"{values['day']} at {values['time']}"
    parse = json.dumps({"intent": intent, "slots": slots}, separators=(", ", ": "))
    return ParseExample(utterance, parse)


def examples(split: str, n: int, seed: int = 0) -> list[ParseExample]:
    """n distinct examples of `split`; the three splits never share an utterance (a fixed-seed stream of candidates,
    each assigned to a split by a hash of its utterance, so the assignment does not depend on n)."""
    if split not in SPLITS:
        raise ConfigError(f"split={split!r}: choose from {list(SPLITS)}")
    if n < 1:
        raise ConfigError(f"n={n} must be >= 1")
    import hashlib

    rng = random.Random(f"parse:{seed}:{split}")
    intents = sorted(INTENTS)
    out: dict[str, ParseExample] = {}
    for _ in range(200 * n):
        intent = rng.choice(intents)
        example = _fill(intent, rng.choice(INTENTS[intent]), rng)
        bucket = int(hashlib.sha256(example.utterance.encode()).hexdigest()[:8], 16) % 10
        home = "train" if bucket < 8 else ("validation" if bucket == 8 else "test")
        if home == split and example.utterance not in out:
            out[example.utterance] = example
            if len(out) == n:
                return list(out.values())
    raise ConfigError(f"only {len(out)} distinct {split} examples exist; ask for fewer than {n}")


def target_ids(tokenizer, example: ParseExample) -> tuple[list[int], list[int]]:
    """(prompt ids, target ids + EOS): the target tokenized after the prompt, as the training stream has it."""
    prompt = tokenizer(example.prompt, add_special_tokens=False)["input_ids"]
    whole = tokenizer(example.prompt + example.target, add_special_tokens=False)["input_ids"]
    if whole[:len(prompt)] != prompt:
        raise ValueError(f"the prompt {example.prompt!r} tokenizes differently inside the full example")
    return prompt, whole[len(prompt):] + [tokenizer.eos_token_id]


class ParseWindows(Dataset):
    """Training examples packed into windows of `seq_len` tokens: "<utterance> => <parse>" EOS, one after another."""

    def __init__(self, tokenizer, items: list[ParseExample], seq_len: int):
        stream: list[int] = []
        for example in items:
            prompt, target = target_ids(tokenizer, example)
            stream += prompt + target
        if len(stream) < seq_len:
            raise ConfigError(f"{len(items)} examples make {len(stream)} tokens, fewer than seq_len={seq_len}")
        self.ids = torch.tensor(stream[:len(stream) // seq_len * seq_len]).view(-1, seq_len)  # [N, T]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.ids[index]
