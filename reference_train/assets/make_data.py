"""Generate the bundled bilingual (Chinese / English) instruction dataset.

The reference LoRA trainer fine-tunes a *tiny* randomly initialised language
model, so the dataset does not need to be "real" - it needs to be:

* **small** (a few hundred lines, checked into the repository),
* **deterministic** (a fixed random seed, so re-running this script gives a
  byte-identical file and a loss curve you can compare across runs),
* **structured** (a handful of sentence templates filled with facts and
  numbers), so a small model's loss drops for real over ~100 steps because it
  learns the templates and patterns, not because it memorises a single line.

Each line of ``data/sft.jsonl`` is a JSON object::

    {"instruction": "17 加 25 等于多少？", "output": "17 加 25 等于 42。"}
    {"instruction": "Translate the following into Chinese.", "input": "red", "output": "红色"}

``input`` is optional (about 15% of samples use it). The trainer turns a
sample into the prompt ``"问：{instruction}\\n答："`` (with the input appended
to the instruction when present) followed by the output and an eos token.

The script also writes ``data/sft_eval_prompts.json``: four fixed
instructions (two Chinese, two English) that the trainer decodes greedily
before and after training so you can eyeball what the model learned.

Run it from anywhere::

    python reference_train/assets/make_data.py

No network access and no third-party packages are needed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 20240601
HERE = Path(__file__).resolve().parent
DATA_DIR = HERE / "data"
SFT_PATH = DATA_DIR / "sft.jsonl"
EVAL_PATH = DATA_DIR / "sft_eval_prompts.json"

# Greedy-decoding prompts used by the trainer for a quick qualitative check.
EVAL_PROMPTS = [
    "中国的首都是哪里？",
    "3 加 5 等于多少？",
    "What is 12 plus 7?",
    "What is the opposite of hot?",
]

# ---------------------------------------------------------------------------
# Facts. Everything below is public, general knowledge.
# ---------------------------------------------------------------------------

# (English country, Chinese country, English capital, Chinese capital)
CAPITALS = [
    ("China", "中国", "Beijing", "北京"),
    ("Japan", "日本", "Tokyo", "东京"),
    ("France", "法国", "Paris", "巴黎"),
    ("Germany", "德国", "Berlin", "柏林"),
    ("Italy", "意大利", "Rome", "罗马"),
    ("Spain", "西班牙", "Madrid", "马德里"),
    ("the United Kingdom", "英国", "London", "伦敦"),
    ("Russia", "俄罗斯", "Moscow", "莫斯科"),
    ("the United States", "美国", "Washington, D.C.", "华盛顿"),
    ("Canada", "加拿大", "Ottawa", "渥太华"),
    ("Mexico", "墨西哥", "Mexico City", "墨西哥城"),
    ("Brazil", "巴西", "Brasilia", "巴西利亚"),
    ("Argentina", "阿根廷", "Buenos Aires", "布宜诺斯艾利斯"),
    ("Australia", "澳大利亚", "Canberra", "堪培拉"),
    ("India", "印度", "New Delhi", "新德里"),
    ("South Korea", "韩国", "Seoul", "首尔"),
    ("Egypt", "埃及", "Cairo", "开罗"),
    ("Kenya", "肯尼亚", "Nairobi", "内罗毕"),
    ("Thailand", "泰国", "Bangkok", "曼谷"),
    ("Vietnam", "越南", "Hanoi", "河内"),
    ("Indonesia", "印度尼西亚", "Jakarta", "雅加达"),
    ("Turkey", "土耳其", "Ankara", "安卡拉"),
    ("Greece", "希腊", "Athens", "雅典"),
    ("Portugal", "葡萄牙", "Lisbon", "里斯本"),
    ("the Netherlands", "荷兰", "Amsterdam", "阿姆斯特丹"),
    ("Belgium", "比利时", "Brussels", "布鲁塞尔"),
    ("Sweden", "瑞典", "Stockholm", "斯德哥尔摩"),
    ("Norway", "挪威", "Oslo", "奥斯陆"),
    ("Finland", "芬兰", "Helsinki", "赫尔辛基"),
    ("Denmark", "丹麦", "Copenhagen", "哥本哈根"),
    ("Poland", "波兰", "Warsaw", "华沙"),
    ("Austria", "奥地利", "Vienna", "维也纳"),
    ("Ireland", "爱尔兰", "Dublin", "都柏林"),
    ("New Zealand", "新西兰", "Wellington", "惠灵顿"),
    ("Peru", "秘鲁", "Lima", "利马"),
    ("Chile", "智利", "Santiago", "圣地亚哥"),
    ("Cuba", "古巴", "Havana", "哈瓦那"),
    ("Iran", "伊朗", "Tehran", "德黑兰"),
    ("Saudi Arabia", "沙特阿拉伯", "Riyadh", "利雅得"),
    ("Hungary", "匈牙利", "Budapest", "布达佩斯"),
]

# Word lists for en <-> zh translation.
COLOURS = [
    ("red", "红色"), ("blue", "蓝色"), ("green", "绿色"), ("yellow", "黄色"),
    ("black", "黑色"), ("white", "白色"), ("purple", "紫色"), ("orange", "橙色"),
    ("pink", "粉色"), ("grey", "灰色"),
]
NUMBERS = [
    ("one", "一"), ("two", "二"), ("three", "三"), ("four", "四"), ("five", "五"),
    ("six", "六"), ("seven", "七"), ("eight", "八"), ("nine", "九"), ("ten", "十"),
]
DAYS = [
    ("Monday", "星期一"), ("Tuesday", "星期二"), ("Wednesday", "星期三"),
    ("Thursday", "星期四"), ("Friday", "星期五"), ("Saturday", "星期六"),
    ("Sunday", "星期日"),
]
MONTHS = [
    ("January", "一月"), ("February", "二月"), ("March", "三月"), ("April", "四月"),
    ("May", "五月"), ("June", "六月"), ("July", "七月"), ("August", "八月"),
    ("September", "九月"), ("October", "十月"), ("November", "十一月"),
    ("December", "十二月"),
]
WORDS = COLOURS + NUMBERS + DAYS + MONTHS

# (English word, English opposite, Chinese word, Chinese opposite)
OPPOSITES = [
    ("big", "small", "大", "小"), ("hot", "cold", "热", "冷"),
    ("high", "low", "高", "低"), ("fast", "slow", "快", "慢"),
    ("long", "short", "长", "短"), ("old", "new", "旧", "新"),
    ("light", "dark", "亮", "暗"), ("full", "empty", "满", "空"),
    ("open", "closed", "开", "关"), ("up", "down", "上", "下"),
    ("left", "right", "左", "右"), ("early", "late", "早", "晚"),
    ("rich", "poor", "富", "穷"), ("thick", "thin", "厚", "薄"),
    ("heavy", "light", "重", "轻"), ("inside", "outside", "里", "外"),
    ("buy", "sell", "买", "卖"), ("happy", "sad", "高兴", "难过"),
    ("easy", "difficult", "容易", "困难"), ("before", "after", "前", "后"),
]

# (English word, English definition, Chinese word, Chinese definition)
DEFINITIONS = [
    ("apple", "a round fruit with red or green skin", "苹果", "一种圆形的水果，皮是红色或绿色的"),
    ("book", "a set of printed pages that you read", "书", "用来阅读的印刷纸页"),
    ("chair", "a seat for one person", "椅子", "供一个人坐的家具"),
    ("table", "a piece of furniture with a flat top", "桌子", "有平面的家具"),
    ("water", "a clear liquid that people drink", "水", "人们喝的透明液体"),
    ("bread", "a food made from flour and baked", "面包", "用面粉烤成的食物"),
    ("dog", "an animal that people keep as a pet", "狗", "人们常养的宠物"),
    ("cat", "a small animal with soft fur", "猫", "一种毛很软的小动物"),
    ("sun", "the star that gives the earth light", "太阳", "给地球带来光的恒星"),
    ("moon", "the object that goes around the earth at night", "月亮", "夜晚绕着地球转的天体"),
    ("rain", "water that falls from the clouds", "雨", "从云里落下的水"),
    ("tree", "a tall plant with a wooden trunk", "树", "有木质树干的高大植物"),
    ("river", "a long flow of water", "河", "长长的流水"),
    ("school", "a place where children learn", "学校", "孩子们学习的地方"),
    ("doctor", "a person who helps sick people", "医生", "帮助病人的人"),
    ("teacher", "a person who teaches students", "老师", "教学生的人"),
    ("clock", "a device that shows the time", "时钟", "显示时间的装置"),
    ("key", "a small tool that opens a lock", "钥匙", "用来开锁的小工具"),
    ("bed", "a piece of furniture for sleeping", "床", "用来睡觉的家具"),
    ("cup", "a small container for drinks", "杯子", "用来装饮料的小容器"),
    ("shoe", "a covering for the foot", "鞋", "穿在脚上的东西"),
    ("bike", "a vehicle with two wheels and pedals", "自行车", "有两个轮子和踏板的车"),
    ("train", "a vehicle that runs on rails", "火车", "在铁轨上行驶的车"),
    ("map", "a drawing of an area of land", "地图", "画出一片土地的图"),
    ("phone", "a device for talking to people far away", "电话", "和远方的人说话的设备"),
    ("milk", "a white drink that comes from cows", "牛奶", "来自奶牛的白色饮料"),
    ("rice", "small grains that people cook and eat", "米饭", "煮熟后吃的小颗粒粮食"),
    ("window", "an opening in a wall that lets in light", "窗户", "墙上让光进来的开口"),
    ("garden", "a piece of land where plants grow", "花园", "种植物的一块地"),
    ("friend", "a person you like and trust", "朋友", "你喜欢并信任的人"),
]

# (English unit, English target, Chinese unit, Chinese target, factor)
UNITS = [
    ("kilometres", "metres", "公里", "米", 1000),
    ("metres", "centimetres", "米", "厘米", 100),
    ("kilograms", "grams", "千克", "克", 1000),
    ("hours", "minutes", "小时", "分钟", 60),
    ("minutes", "seconds", "分钟", "秒", 60),
    ("days", "hours", "天", "小时", 24),
    ("weeks", "days", "周", "天", 7),
    ("litres", "millilitres", "升", "毫升", 1000),
]

SPELL_WORDS = [
    "cat", "dog", "sun", "tree", "book", "apple", "house", "water", "green",
    "river", "music", "paper", "garden", "yellow", "orange", "window", "school",
    "friend", "summer", "winter", "planet", "rabbit", "pencil", "bottle",
]
ZH_WORDS = [
    "苹果", "老师", "学校", "太阳", "月亮", "自行车", "图书馆", "火车站",
    "电视机", "大熊猫", "中国", "朋友", "地图", "星期一", "长城", "牛奶",
]
FRUITS_EN = ["apple", "pear", "plum", "grape", "lemon", "peach", "mango", "cherry"]
FRUITS_ZH = ["苹果", "梨", "李子", "葡萄", "柠檬", "桃子", "芒果", "樱桃"]


# ---------------------------------------------------------------------------
# Sample makers. Each returns a list of dicts; ``rng`` is the shared seeded
# random.Random so the whole file is reproducible.
# ---------------------------------------------------------------------------

def sample(instruction: str, output: str, input_text: str | None = None) -> dict:
    row = {"instruction": instruction}
    if input_text is not None:
        row["input"] = input_text
    row["output"] = output
    return row


def arithmetic(rng: random.Random, n_add: int, n_sub: int, n_mul: int) -> list[dict]:
    rows = []
    for _ in range(n_add):
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        rows.append(sample(f"{a} 加 {b} 等于多少？", f"{a} 加 {b} 等于 {a + b}。"))
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        rows.append(sample(f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."))
    for _ in range(n_sub):
        a = rng.randint(10, 99)
        b = rng.randint(1, a)
        rows.append(sample(f"{a} 减 {b} 等于多少？", f"{a} 减 {b} 等于 {a - b}。"))
        a = rng.randint(10, 99)
        b = rng.randint(1, a)
        rows.append(sample(f"What is {a} minus {b}?", f"{a} minus {b} is {a - b}."))
    for _ in range(n_mul):
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        rows.append(sample(f"{a} 乘以 {b} 等于多少？", f"{a} 乘以 {b} 等于 {a * b}。"))
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        rows.append(sample(f"What is {a} times {b}?", f"{a} times {b} is {a * b}."))
    return rows


def capitals(rng: random.Random) -> list[dict]:
    rows = []
    for en_country, zh_country, en_cap, zh_cap in CAPITALS:
        zh_q = rng.choice(["{c}的首都是哪里？", "{c}的首都是什么？"]).format(c=zh_country)
        rows.append(sample(zh_q, f"{zh_country}的首都是{zh_cap}。"))
        en_q = rng.choice(["What is the capital of {c}?", "Which city is the capital of {c}?"])
        rows.append(sample(en_q.format(c=en_country), f"The capital of {en_country} is {en_cap}."))
    return rows


def translations(rng: random.Random, n_each: int) -> list[dict]:
    """Word translation, half of it using the ``input`` field."""
    rows = []
    to_zh = rng.sample(WORDS, n_each)
    to_en = rng.sample(WORDS, n_each)
    for i, (en, zh) in enumerate(to_zh):
        if i % 2 == 0:
            rows.append(sample("Translate the following into Chinese.", zh, input_text=en))
        else:
            rows.append(sample(f'How do you say "{en}" in Chinese?', f'"{en}" in Chinese is {zh}.'))
    for i, (en, zh) in enumerate(to_en):
        if i % 2 == 0:
            rows.append(sample("把下面的内容翻译成英文。", en, input_text=zh))
        else:
            rows.append(sample(f"“{zh}”用英文怎么说？", f"“{zh}”的英文是 {en}。"))
    return rows


def opposites() -> list[dict]:
    rows = []
    for en, en_opp, zh, zh_opp in OPPOSITES:
        rows.append(sample(f"“{zh}”的反义词是什么？", f"“{zh}”的反义词是“{zh_opp}”。"))
        rows.append(sample(f"What is the opposite of {en}?", f"The opposite of {en} is {en_opp}."))
    return rows


def definitions() -> list[dict]:
    rows = []
    for en, en_def, zh, zh_def in DEFINITIONS:
        rows.append(sample(f"“{zh}”是什么意思？", f"{zh}是{zh_def}。"))
        article = "an" if en[0] in "aeiou" else "a"
        rows.append(sample(f"What is {article} {en}?", f"{article.capitalize()} {en} is {en_def}."))
    return rows


def unit_conversions(rng: random.Random, n_each: int) -> list[dict]:
    rows = []
    for _ in range(n_each):
        en_u, en_t, zh_u, zh_t, f = rng.choice(UNITS)
        n = rng.randint(1, 9)
        rows.append(sample(f"{n} {zh_u}等于多少{zh_t}？", f"{n} {zh_u}等于 {n * f} {zh_t}。"))
        en_u, en_t, zh_u, zh_t, f = rng.choice(UNITS)
        n = rng.randint(1, 9)
        rows.append(sample(f"How many {en_t} are in {n} {en_u}?", f"{n} {en_u} is {n * f} {en_t}."))
    return rows


def letters(rng: random.Random) -> list[dict]:
    rows = []
    for i, word in enumerate(SPELL_WORDS):
        if i % 2 == 0:
            rows.append(sample(f'How many letters are in the word "{word}"?',
                               f'The word "{word}" has {len(word)} letters.'))
        else:
            rows.append(sample(f'Spell the word "{word}".', "-".join(word) + "."))
    for word in ZH_WORDS:
        rows.append(sample(f"“{word}”有几个字？", f"“{word}”有 {len(word)} 个字。"))
    return rows


def sequences(rng: random.Random, n_each: int) -> list[dict]:
    rows = []
    for lang in ("zh", "en") * n_each:
        start, step = rng.randint(1, 20), rng.randint(1, 9)
        seq = [start + step * k for k in range(4)]
        shown = ", ".join(str(x) for x in seq)
        nxt = start + step * 4
        if lang == "zh":
            rows.append(sample(f"下一个数字是什么：{shown}？", f"下一个数字是 {nxt}。"))
        else:
            rows.append(sample(f"What comes next: {shown}?", f"The next number is {nxt}."))
    return rows


def list_tasks(rng: random.Random, n_each: int) -> list[dict]:
    """Reverse a short list and sort three numbers (these use ``input``)."""
    rows = []
    for _ in range(n_each):
        items = rng.sample(FRUITS_ZH, 3)
        rows.append(sample("把下面的列表倒过来。", "、".join(reversed(items)), input_text="、".join(items)))
        items = rng.sample(FRUITS_EN, 3)
        rows.append(sample("Reverse the following list.", ", ".join(reversed(items)),
                           input_text=", ".join(items)))
        nums = rng.sample(range(1, 100), 3)
        rows.append(sample("把下面三个数从小到大排序。", "、".join(str(x) for x in sorted(nums)),
                           input_text="、".join(str(x) for x in nums)))
        nums = rng.sample(range(1, 100), 3)
        rows.append(sample("Sort these three numbers from smallest to largest.",
                           ", ".join(str(x) for x in sorted(nums)),
                           input_text=", ".join(str(x) for x in nums)))
    return rows


def build(rng: random.Random) -> list[dict]:
    rows: list[dict] = []
    rows += arithmetic(rng, n_add=30, n_sub=15, n_mul=15)   # 120
    rows += capitals(rng)                                   # 80
    rows += translations(rng, n_each=30)                    # 60
    rows += opposites()                                     # 40
    rows += definitions()                                   # 60
    rows += unit_conversions(rng, n_each=20)                # 40
    rows += letters(rng)                                    # 40
    rows += sequences(rng, n_each=15)                       # 30
    rows += list_tasks(rng, n_each=10)                      # 40

    # Random arithmetic/units can repeat a question; keep the first copy.
    seen: set[tuple[str, str]] = set()
    unique = []
    for row in rows:
        key = (row["instruction"], row.get("input", ""))
        if key not in seen:
            seen.add(key)
            unique.append(row)
    rng.shuffle(unique)
    return unique


def is_chinese(row: dict) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in row["instruction"])


def main() -> None:
    rng = random.Random(SEED)
    rows = build(rng)
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    with open(SFT_PATH, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    with open(EVAL_PATH, "w", encoding="utf-8", newline="\n") as f:
        json.dump(EVAL_PROMPTS, f, ensure_ascii=False, indent=2)
        f.write("\n")

    n_zh = sum(is_chinese(r) for r in rows)
    n_input = sum("input" in r for r in rows)
    print(f"wrote {len(rows)} samples to {SFT_PATH} "
          f"(zh {n_zh}, en {len(rows) - n_zh}, with input {n_input})")
    print(f"wrote {len(EVAL_PROMPTS)} eval prompts to {EVAL_PATH}")


if __name__ == "__main__":
    main()
