"""Write the `smoke` fixture: a small, deterministic, Wikipedia-style open-domain QA collection.

Fictional entities (towns, scientists, rivers, companies), each described by several
~60-110-word passages. Questions paraphrase the passage sentences (synonyms, reordered
clauses), and every entity has several passages, so BM25 cannot rely on the entity name
alone: the fixture is small but not trivial. Questions are split train/test by entity.

Outputs (harness/datasets/smoke/): corpus.jsonl (id, title, text), questions.jsonl
(id, question, answers, split, gold passage ids), qrels.txt (TREC qrels of the test questions).

Run: python scripts/make_smoke_fixture.py [--check]   (--check: fail if the committed files differ)
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "harness" / "datasets" / "smoke"
SEED = 20240611
SYL = ["var", "nol", "tek", "mor", "ash", "bel", "dri", "kan", "lum", "ost", "pel", "rin", "sav", "tor",
       "ul", "ven", "wex", "yar", "zel", "quin", "hal", "mir", "dun", "fel", "gor", "isk", "jor", "lev"]
FIRST = ["Anika", "Borek", "Celia", "Dariusz", "Elin", "Farid", "Greta", "Hugo", "Ilse", "Jonas", "Katya",
         "Lorenz", "Mira", "Nils", "Odile", "Pavel", "Runa", "Stefan", "Tilde", "Viktor"]
REGIONS = ["Eastmarch", "Kovalia", "the Northern Reach", "Lower Savonne", "Brackwater", "the Ilden Plain",
           "Ostria", "the Fenlands"]
SEAS = ["the Grey Sea", "the Amber Gulf", "Lake Thessil", "the Narrow Strait", "the Pale Ocean"]
MOUNTAINS = ["Mount Keld", "the Varro Hills", "the Isen Range", "Mount Orrin", "the Dusk Peaks"]
PRODUCTS = ["woollen cloth", "copper kettles", "salted herring", "blue glass", "clockwork toys",
            "rye whisky", "printed maps", "leather saddles", "ceramic tiles", "river barges"]
FIELDS = ["crystal optics", "marine botany", "seismic waves", "alloy chemistry", "bird migration",
          "glacier physics", "soil microbes", "radio astronomy"]
AWARDS = ["the Halvard Medal", "the Orrin Prize", "the Silver Compass", "the Meridian Award"]
UNIVS = ["the University of {t}", "the {t} Polytechnic", "the Royal Academy of {t}"]
FILLER = [
    "Local historians still debate the details of this period.",
    "Visitors often remark on the quiet streets and old stone bridges.",
    "Records from the era were partly lost in a fire at the archive.",
    "The surrounding countryside is known for its orchards and windmills.",
    "Several guidebooks describe the area as one of the most scenic in {r}.",
    "Much of this account comes from letters kept by the regional library.",
    "The annual autumn fair attracts traders from across {r}.",
    "A small museum displays tools and photographs from that time.",
]


def name(rng: random.Random, n: int = 2) -> str:
    return "".join(rng.choice(SYL) for _ in range(n)).capitalize()


def make(rng: random.Random):
    towns = sorted({name(rng) + rng.choice(["holt", "burg", "wick", "stad", "mere"]) for _ in range(22)})[:18]
    people = sorted({f"{rng.choice(FIRST)} {name(rng, 3)}" for _ in range(18)})[:14]
    rivers = sorted({f"{name(rng)} River" for _ in range(12)})[:10]
    firms = sorted({f"{name(rng)} {rng.choice(['Works', 'Company', 'Brothers', 'Industries'])}" for _ in range(12)})[:10]
    entities = []  # (title, [(sentence, [(question, answer)])...])

    def filler(r: str) -> str:
        return " ".join(s.format(r=r) for s in rng.sample(FILLER, 2))

    for t in towns:
        r = rng.choice(REGIONS)
        year = rng.randint(1100, 1890)
        pop = rng.randint(2, 95) * 1000 + rng.randint(1, 9) * 100
        prod = rng.choice(PRODUCTS)
        mayor = f"{rng.choice(FIRST)} {name(rng, 3)}"
        twin = rng.choice([x for x in towns if x != t])
        facts = [
            (f"{t} was founded in {year} by settlers who came from the coast of {r}.",
             [(f"In which year was {t} established?", str(year))]),
            (f"Today {t} has a population of about {pop:,} people, most of whom work in the old quarter.",
             [(f"How many inhabitants live in {t}?", f"{pop:,}")]),
            (f"The economy of {t} grew rich on {prod}, which merchants shipped to every port of {r}.",
             [(f"What product made the town of {t} wealthy?", prod)]),
            (f"Since the last election the town council of {t} has been led by mayor {mayor}.",
             [(f"Who is the current head of the {t} council?", mayor)]),
            (f"In 1961 {t} signed a partnership agreement with {twin}, and students travel between them each summer.",
             [(f"Which town is twinned with {t}?", twin)]),
        ]
        entities.append((t, r, facts))
    for p in people:
        r = rng.choice(REGIONS)
        born = rng.randint(1780, 1950)
        town = rng.choice(towns)
        field = rng.choice(FIELDS)
        award = rng.choice(AWARDS)
        univ = rng.choice(UNIVS).format(t=rng.choice(towns))
        surname = p.split()[-1]
        facts = [
            (f"{p} was born in {town} in {born}, the youngest of four children.",
             [(f"Where was {p} born?", town), (f"What year was {p} born?", str(born))]),
            (f"{surname} studied at {univ}, where a lecture on {field} changed the direction of the work.",
             [(f"At which institution was {p} educated?", univ)]),
            (f"The research of {surname} concentrated on {field}, and the results were published in many journals.",
             [(f"What was the scientific speciality of {p}?", field)]),
            (f"In recognition of this work, {p} received {award} late in life.",
             [(f"Which honour was awarded to {p}?", award)]),
        ]
        entities.append((p, r, facts))
    for rv in rivers:
        r = rng.choice(REGIONS)
        km = rng.randint(40, 900)
        src = rng.choice(MOUNTAINS)
        sea = rng.choice(SEAS)
        via = rng.choice(towns)
        facts = [
            (f"The {rv} is {km} kilometres long and is the main waterway of {r}.",
             [(f"What is the length of the {rv}?", f"{km} kilometres")]),
            (f"The {rv} rises on the slopes of {src} and gathers several mountain streams.",
             [(f"Where is the source of the {rv}?", src)]),
            (f"After a slow course through farmland, the {rv} empties into {sea}.",
             [(f"Into which body of water does the {rv} flow?", sea)]),
            (f"The largest town on the banks of the {rv} is {via}, famous for its bridges.",
             [(f"Which is the biggest town along the {rv}?", via)]),
        ]
        entities.append((rv, r, facts))
    for f in firms:
        r = rng.choice(REGIONS)
        founder = rng.choice(people)
        year = rng.randint(1820, 1990)
        hq = rng.choice(towns)
        prod = rng.choice(PRODUCTS)
        staff = rng.randint(3, 60) * 100
        facts = [
            (f"{f} was started in {year} by {founder} in a rented workshop.",
             [(f"Who founded {f}?", founder), (f"When was {f} created?", str(year))]),
            (f"The headquarters of {f} are in {hq}, close to the railway station.",
             [(f"In which town is {f} based?", hq)]),
            (f"{f} is best known for manufacturing {prod} sold across {r}.",
             [(f"What does {f} make?", prod)]),
            (f"By the end of the last decade {f} employed roughly {staff:,} workers.",
             [(f"How many staff does {f} have?", f"{staff:,}")]),
        ]
        entities.append((f, r, facts))
    return entities


def build() -> tuple[list[dict], list[dict], list[str]]:
    rng = random.Random(SEED)
    entities = make(rng)
    corpus, questions = [], []
    order = list(range(len(entities)))
    rng.shuffle(order)
    test_entities = set(order[: len(order) // 4])
    for ei, (title, region, facts) in enumerate(entities):
        rng.shuffle(facts)
        # group facts into passages of 2 (last may have 1), each padded with filler to ~60-110 words
        for pi in range(0, len(facts), 2):
            group = facts[pi:pi + 2]
            pid = f"p{len(corpus):04d}"
            text = " ".join([group[0][0], FILLER[rng.randrange(len(FILLER))].format(r=region)]
                            + [g[0] for g in group[1:]]
                            + [" ".join(s.format(r=region) for s in rng.sample(FILLER, 2))])
            corpus.append({"id": pid, "title": title, "text": text})
            for _, qas in group:
                for q, a in qas:
                    questions.append({"id": f"q{len(questions):04d}", "question": q, "answers": [a],
                                      "split": "test" if ei in test_entities else "train", "gold": [pid]})
    qrels = [f"{q['id']} 0 {g} 1" for q in questions if q["split"] == "test" for g in q["gold"]]
    return corpus, questions, qrels


def render() -> dict[str, str]:
    corpus, questions, qrels = build()
    return {
        "corpus.jsonl": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in corpus),
        "questions.jsonl": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in questions),
        "qrels.txt": "\n".join(qrels) + "\n",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    files = render()
    if args.check:
        bad = [n for n, t in files.items() if not (OUT / n).exists() or (OUT / n).read_text() != t]
        if bad:
            print(f"fixture differs from generator: {bad}", file=sys.stderr)
            return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for n, t in files.items():
        (OUT / n).write_text(t)
    print({n: t.count("\n") for n, t in files.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
