"""Protocol numbers and header layouts the packet reader relies on, named once.

Every number the decoders compare against (link types, ethertypes, IP protocol
numbers, TCP flag bits, tunnel ports) and every fixed header offset lives here, so
the decoding logic reads as the protocol it implements.
"""

from __future__ import annotations

# --- libpcap link types (https://www.tcpdump.org/linktypes.html) --------------------
LT_NULL = 0
LT_ETHERNET = 1
LT_PPP = 9
LT_RAW = 12  # also 14 and 101 on some systems
LT_RAW_ALT = (14, 101)
LT_C_HDLC = 104
LT_IEEE802_11 = 105
LT_LOOP = 108
LT_LINUX_SLL = 113
LT_IEEE802_11_RADIOTAP = 127
LT_PPI = 192
LT_IPV4 = 228
LT_IPV6 = 229
LT_NFLOG = 239
LT_LINUX_SLL2 = 276
LT_BROKEN = -1  # internal: a PPI header already found broken

LT_RAW_IP = (LT_RAW, *LT_RAW_ALT)
LT_LOOPBACK = (LT_NULL, LT_LOOP)

# --- ethertypes -------------------------------------------------------------------
ET_IPV4 = 0x0800
ET_IPV6 = 0x86DD
ET_VLAN = (0x8100, 0x88A8, 0x9100)  # 802.1Q, 802.1ad (QinQ outer), old QinQ
ET_MPLS = (0x8847, 0x8848)  # unicast, multicast
ET_PPPOE_SESSION = 0x8864
ET_TEB = 0x6558  # transparent Ethernet bridging (an Ethernet frame follows)
ET_ERSPAN_2 = 0x88BE  # ERSPAN type II (also type I, with no header, in GRE)
ET_ERSPAN_3 = 0x22EB
ETH_MAX_LENGTH = 1500  # an "ethertype" at or below this is an 802.3 length: LLC follows

# --- link-layer header sizes ------------------------------------------------------
ETH_HEADER = 14  # destination, source, ethertype
ETH_TYPE_AT = 12
SLL_HEADER, SLL_TYPE_AT = 16, 14
SLL2_HEADER, SLL2_TYPE_AT = 20, 0
LOOP_HEADER = 4  # the address family, in the writer's byte order
C_HDLC_HEADER, C_HDLC_TYPE_AT = 4, 2  # address, control, ethertype
VLAN_TAG = 4  # tag control (priority, DEI, 12-bit id), then the next ethertype
MPLS_LABEL = 4
PPPOE_HEADER = 6  # version/type, code, session, length; then the PPP protocol
LLC_SNAP = 8  # DSAP 0xAA, SSAP 0xAA, control 0x03, OUI (3), ethertype (2)
LLC_SNAP_SAP = 0xAA
VLAN_ID_MASK = 0x0FFF

# BSD loopback address families for IPv6 differ between systems.
AF_INET = 2
AF_INET6_BSD = (24, 28, 30)
AF_INET6_LINUX = 10  # NFLOG carries Linux's

# PPP protocol field -> ethertype
PPP_TO_ETHERTYPE = {0x0021: ET_IPV4, 0x0057: ET_IPV6, 0x0281: 0x8847, 0x0283: 0x8848}
PPP_ADDRESS, PPP_CONTROL = 0xFF, 0x03
C_HDLC_UNICAST, C_HDLC_MULTICAST = 0x0F, 0x8F

# --- 802.11 -------------------------------------------------------------------------
WLAN_HEADER = 24  # frame control, duration, three addresses, sequence control
WLAN_ADDR4 = 6  # a fourth address when both ToDS and FromDS are set
WLAN_QOS = 2
WLAN_HT_CONTROL = 4
WLAN_TYPE_DATA = 2

# --- NFLOG (Linux netfilter log) ----------------------------------------------------
NFLOG_HEADER = 4  # family, version, resource id
NFLOG_TLV_PAYLOAD = 9  # NFULA_PAYLOAD: the packet, from its IP header

# --- IP -------------------------------------------------------------------------------
IPV4_MIN_HEADER = 20
IPV6_HEADER = 40
IPV4_FLAGS_OFFSET_MASK = 0x3FFF  # MF flag and the 13-bit fragment offset
IPV4_MF = 0x2000
IPV4_OFFSET_MASK = 0x1FFF
IPV4_PROTO_AT = 9
IPV4_CHECKSUM = slice(10, 12)
IPV4_ADDRESSES = slice(12, 20)  # source, destination
IPV6_ADDRESSES = slice(8, 40)
IPV4_SRC_AT, IPV4_DST_AT = 12, 16
IPV6_SRC_AT, IPV6_DST_AT = 8, 24

PROTO_HOPOPT = 0
PROTO_IPIP = 4
PROTO_TCP = 6
PROTO_UDP = 17
PROTO_IPV6 = 41
PROTO_IPV6_ROUTE = 43
PROTO_IPV6_FRAG = 44
PROTO_GRE = 47
PROTO_ESP = 50
PROTO_AH = 51
PROTO_IPV6_NONXT = 59
PROTO_IPV6_OPTS = 60
IPV6_EXTENSIONS = (0, 43, 60, 44, 51, 135, 139, 140)  # followed to the transport header
IPV6_FRAG_HEADER = 8

# --- TCP / UDP ------------------------------------------------------------------------
TCP_MIN_HEADER = 20
UDP_HEADER = 8
TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK, TCP_URG, TCP_ECE, TCP_CWR = (
    0x01,
    0x02,
    0x04,
    0x08,
    0x10,
    0x20,
    0x40,
    0x80,
)
TCP_SEQ_AT = 4
TCP_CHECKSUM_AT = 16
UDP_CHECKSUM_AT = 6
PORTS = slice(0, 4)  # source and destination port, TCP and UDP alike


def is_pure_syn(flags):
    """SYN without ACK: the first packet of a TCP handshake (works on arrays)."""
    return (flags & (TCP_SYN | TCP_ACK)) == TCP_SYN


# --- tunnels ----------------------------------------------------------------------------
GRE_HEADER = 4  # flags/version, protocol type; then optional checksum, key, sequence
GRE_C, GRE_K, GRE_S = 0x8000, 0x2000, 0x1000
GRE_A = 0x0080  # version 1 (PPTP): an acknowledgment number follows
ET_PPP = 0x880B  # PPP in GRE version 1 (PPTP)
ERSPAN_2_HEADER = 8
ERSPAN_3_HEADER = 12
ERSPAN_3_SUBHEADER = 8  # present when the O bit is set
UDP_PORT_VXLAN = 4789
UDP_PORT_GENEVE = 6081
UDP_PORT_GTP_U = 2152
UDP_PORT_CAPWAP_DATA = 5247
VXLAN_HEADER = 8
GENEVE_HEADER = 8  # + 4 * option length (6 bits of the first byte)
GTP_HEADER = 8  # + 4 when any of E, S, PN is set, then extension headers
GTP_EXT_FLAGS = 0x07
GTP_E_FLAG = 0x04
GTP_G_PDU = 0xFF
CAPWAP_T_BIT = 8  # bit of the first word: the payload is in its native (802.11) format
CAPWAP_F_BIT = 7  # a fragment
