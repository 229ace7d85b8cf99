import XCTest
@testable import StrataServer

/// Every event is one line (an outside review found a quarantine's quick_check report spread
/// over eight lines, which line-based log collectors split into fragments).
final class LogFormatTests: XCTestCase {
    func testValuesAreQuotedAndControlCharactersEscaped() {
        XCTAssertEqual(Logger.value("plain"), "plain")
        XCTAssertEqual(Logger.value("two words"), "\"two words\"")
        XCTAssertEqual(Logger.value("a=b"), "\"a=b\"")
        XCTAssertEqual(Logger.value(""), "\"\"")
        XCTAssertEqual(Logger.value("say \"hi\""), "\"say 'hi'\"")
        XCTAssertEqual(Logger.value("line1\nline2"), "\"line1\\nline2\"")
        XCTAssertEqual(Logger.value("a\tb\rc\u{1}d\u{7f}"), "\"a\\tb\\rc\\x01d\\x7f\"")
        XCTAssertEqual(Logger.oneLine("level=error event=disk_quarantined reason=\"x\n*** in database main ***\n\""),
                       "level=error event=disk_quarantined reason=\"x\\n*** in database main ***\\n\"")
        XCTAssertFalse(Logger.value("é ünïcode\nx").contains("\n"))
    }
}
