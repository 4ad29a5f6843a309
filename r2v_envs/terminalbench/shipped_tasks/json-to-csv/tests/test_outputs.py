import csv, json

def test_csv():
    users = json.load(open("users.json"))
    want = [[str(u["id"]), u["name"], u["email"].lower()]
            for u in sorted(users, key=lambda u: u["id"]) if u["active"]]
    with open("users.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["id", "name", "email"]
    assert rows[1:] == want
