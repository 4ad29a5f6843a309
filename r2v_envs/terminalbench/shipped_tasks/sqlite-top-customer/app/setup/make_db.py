import random, sqlite3
rng = random.Random(11)
db = sqlite3.connect("shop.db")
db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount REAL)")
names = ["Ada", "Grace", "Linus", "Barbara", "Ken", "Margaret", "Dennis", "Frances"]
db.executemany("INSERT INTO customers VALUES (?, ?)", list(enumerate(names, 1)))
rows = [(i, rng.randint(1, len(names)), round(rng.uniform(5, 400), 2)) for i in range(1, 301)]
db.executemany("INSERT INTO orders VALUES (?, ?, ?)", rows)
db.commit()
